// Puts the panel's page (the webview bundle, html.ts's CSP and a fresh nonce) into a webview:
// the memory panel and the fit panel load the same bundle.
import * as vscode from 'vscode';
import { makeNonce, panelHtml } from './html';

export function loadPanelPage(webview: vscode.Webview, dist: vscode.Uri, title: string): void {
  webview.html = panelHtml({
    scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.js')).toString(),
    styleUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.css')).toString(),
    cspSource: webview.cspSource,
    nonce: makeNonce(),
    title,
  });
}
