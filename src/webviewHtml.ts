// The page of the report panel: the panel bundle (dist/webview.js, dist/webview.css) under a
// strict Content Security Policy. Scripts run only with this page's nonce, nothing is fetched
// from the network, and the snapshot arrives later by message, never as a file URL.
// No `vscode` import: panelHost.ts supplies the webview's URIs.
import { randomBytes } from 'node:crypto';

export interface PageOptions {
  /** webview.cspSource: the origin VS Code serves local resources from. */
  cspSource: string;
  scriptUri: string;
  styleUri: string;
  nonce: string;
  title: string;
}

export function makeNonce(): string {
  return randomBytes(18).toString('base64').replace(/[+/=]/g, '');
}

export function contentSecurityPolicy(cspSource: string, nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    // The bundle's stylesheet, and the styles its web components adopt at run time.
    `style-src ${cspSource} 'nonce-${nonce}'`,
    `img-src ${cspSource} data:`,
    `font-src ${cspSource} data:`,
    "connect-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "object-src 'none'",
  ].join('; ');
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

export function panelHtml(o: PageOptions): string {
  const attr = escapeHtml;
  return [
    '<!DOCTYPE html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    `<meta http-equiv="Content-Security-Policy" content="${attr(contentSecurityPolicy(o.cspSource, o.nonce))}">`,
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${escapeHtml(o.title)}</title>`,
    `<link rel="stylesheet" href="${attr(o.styleUri)}" nonce="${attr(o.nonce)}">`,
    '</head>',
    '<body class="memlens-vscode">',
    '<div id="memlens-root"></div>',
    `<script nonce="${attr(o.nonce)}" src="${attr(o.scriptUri)}"></script>`,
    '</body>',
    '</html>',
  ].join('\n');
}
