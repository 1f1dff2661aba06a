import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { contentSecurityPolicy, escapeHtml, makeNonce, panelHtml } from '../../src/panel/html';

const page = {
  scriptUri: 'https://file+.vscode-resource.vscode-cdn.net/ext/dist/webview.js',
  styleUri: 'https://file+.vscode-resource.vscode-cdn.net/ext/dist/webview.css',
  cspSource: 'https://*.vscode-cdn.net',
  nonce: 'abc123',
  title: 'Memory: <run>&"x"',
};

test('the CSP allows only the nonce’d script and the extension’s own files', () => {
  const csp = contentSecurityPolicy(page.cspSource, page.nonce);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'nonce-abc123'(;|$)/);
  assert.match(csp, /style-src https:\/\/\*\.vscode-cdn\.net(;|$)/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*;|http:/);
});

test('the page has one script, with the nonce, and no inline code', () => {
  const html = panelHtml(page);
  const scripts = html.match(/<script\b[^>]*>/g) ?? [];
  assert.deepEqual(scripts, [`<script nonce="abc123" src="${page.scriptUri}">`]);
  assert.match(html, /<script nonce="abc123" src="[^"]+"><\/script>/);
  assert.ok(html.includes(`<link rel="stylesheet" href="${page.styleUri}">`));
  assert.ok(html.includes('<title>Memory: &lt;run&gt;&amp;&quot;x&quot;</title>'));
  assert.doesNotMatch(html, /style="/);
});

test('nonces are fresh and URL-safe', () => {
  const nonces = Array.from({ length: 500 }, () => makeNonce());
  assert.equal(new Set(nonces).size, nonces.length);
  for (const nonce of nonces) assert.match(nonce, /^[A-Za-z0-9]{32}$/);
  assert.equal(escapeHtml(`<a href='x'>`), '&lt;a href=&#39;x&#39;&gt;');
});
