// The memory panel's page inside VS Code: the bundle by webview URI, a strict CSP with a fresh
// nonce, nothing inline but the nonce'd script tag. No `vscode` import: unit-tested with Node.
import { randomBytes } from 'node:crypto';

export interface PanelPage {
  /** webview.asWebviewUri of dist/webview.js and dist/webview.css. */
  scriptUri: string;
  styleUri: string;
  /** webview.cspSource. */
  cspSource: string;
  nonce: string;
  title: string;
}

/** A random nonce, fresh for every page: 128 bits as 32 hex digits (always the same
 * length; stripping base64's '+' and '/' could make it shorter). */
export function makeNonce(): string {
  return randomBytes(16).toString('hex');
}

export function contentSecurityPolicy(cspSource: string, nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src ${cspSource}`,
    `img-src ${cspSource} data:`,
    `font-src ${cspSource}`,
    "connect-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "object-src 'none'",
  ].join('; ');
}

export function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

export function panelHtml(p: PanelPage): string {
  const attr = escapeHtml;
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${attr(contentSecurityPolicy(p.cspSource, p.nonce))}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(p.title)}</title>
<link rel="stylesheet" href="${attr(p.styleUri)}">
</head>
<body>
<div id="memlens-root"></div>
<script nonce="${attr(p.nonce)}" src="${attr(p.scriptUri)}"></script>
</body>
</html>
`;
}
