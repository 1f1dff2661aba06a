import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { contentSecurityPolicy, makeNonce, panelHtml } from '../../src/webviewHtml';

test('the policy allows only nonce scripts and nothing remote', () => {
  const csp = contentSecurityPolicy('https://x.vscode-cdn.net', 'abc');
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'nonce-abc'(;|$)/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/);
  assert.match(csp, /connect-src 'none'/);
});

test('the page loads the bundle with the nonce and has no inline script', () => {
  const nonce = makeNonce();
  assert.match(nonce, /^[A-Za-z0-9]{20,}$/);
  assert.notEqual(nonce, makeNonce());
  const html = panelHtml({ cspSource: 'vscode-resource:', scriptUri: 'vscode-resource:/dist/webview.js', styleUri: 'vscode-resource:/dist/webview.css', nonce, title: '<GPT> & co' });
  assert.match(html, new RegExp(`<script nonce="${nonce}" src="vscode-resource:/dist/webview.js"></script>`));
  assert.equal(html.match(/<script/g)?.length, 1);
  assert.match(html, /<title>&lt;GPT&gt; &amp; co<\/title>/);
  assert.match(html, /id="memlens-root"/);
});
