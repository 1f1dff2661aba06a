// Sample end-to-end test: the packaged extension in a real VS Code (code-server) in Chromium.
// It also exercises every harness helper once, so a VS Code upgrade that breaks a selector
// fails here first.
import { strict as assert } from 'node:assert';
import { after, before, test } from 'node:test';
import { Session } from './session';
import { timeouts } from './timeouts';

let session: Session;

before(async () => {
  session = await Session.start({ name: 'hello' });
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

test('Memlens: Hello shows a notification, an after-line decoration, a hover and a status item', { timeout: timeouts.test }, async () => {
  await session.step('open-file', (wb) => wb.openFile('model.py'));
  await session.capture('01-model-open');

  await session.step('run-hello', (wb) => wb.runCommand('Memlens: Hello'));

  const note = await session.step('notification', (wb) => wb.waitForNotification('Hello from Torch Memory Lens'));
  assert.equal(note.severity, 'info');

  const decorations = await session.step('decoration', (wb) => wb.waitForDecoration('≈ hello', 1));
  assert.deepEqual(decorations, [{ line: 1, text: '≈ hello' }]);

  const status = await session.step('status-bar', (wb) => wb.statusBarItems());
  assert.ok(
    status.some((s) => s.text === 'Memlens: hello'),
    `status bar: ${JSON.stringify(status)}`,
  );
  await session.capture('02-after-hello');

  const hover = await session.step('hover', (wb) => wb.hoverLine(1));
  assert.match(hover, /Torch Memory Lens placeholder annotation/);
  await session.capture('03-hover');
  await session.step('dismiss-hover', (wb) => wb.dismissHover());
});

test('webview helpers find the content frame of a webview', { timeout: timeouts.test }, async () => {
  // The built-in Markdown preview is a webview: it checks the nested-iframe helpers without
  // depending on features of our extension that do not exist yet.
  await session.step('open-readme', (wb) => wb.openFile('README.md'));
  await session.step('preview', (wb) => wb.runCommand('Markdown: Open Preview to the Side'));
  const frame = await session.step('webview', (wb) =>
    wb.waitForWebview('Fixture workspace', 'vscode.markdown-language-features'),
  );
  assert.equal(await frame.locator('h1').innerText(), 'Fixture workspace');
  await session.capture('04-markdown-preview');
});

test('no unexpected errors in the browser, code-server or extension host logs', () => {
  assert.deepEqual(session.unexpectedErrors(), []);
});
