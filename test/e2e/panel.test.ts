// The memory panel in a real VS Code: trace the example GPT inside the workspace, open the panel
// for its snapshot, switch tabs, click a stack frame and check the editor jumps to that line.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { Frame } from 'playwright-core';
import { extensionPython, repoRoot } from './paths';
import { Session } from './session';
import { timeouts } from './timeouts';

const EXTENSION = 'memlens.torch-memory-lens';
let session: Session;

before(async () => {
  session = await Session.start({ name: 'panel', settings: { 'memlens.python': extensionPython(), 'memlens.device': 'cpu' } });
  // The traced example lives in the workspace, so the snapshot's frames point at its files.
  const gpt = path.join(session.workspace, 'gpt');
  mkdirSync(gpt, { recursive: true });
  for (const f of ['model.py', 'train.py']) copyFileSync(path.join(repoRoot, 'examples/gpt', f), path.join(gpt, f));
  execFileSync(
    extensionPython(),
    ['-m', 'memlens', 'run', '--device', 'cpu', '--progress', 'none', '--snapshot', '.memlens/gpt/run.json', '--', 'gpt/train.py', '--batch-size', '2', '--n-layer', '2', '--block-size', '128'],
    { cwd: session.workspace, env: { ...process.env, PYTHONPATH: path.join(repoRoot, 'python') }, stdio: 'ignore' },
  );
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

async function showTab(panel: Frame, tab: string): Promise<void> {
  await panel.click(`vscode-tab-header[data-tab=${tab}]`);
  await panel.waitForSelector(`body[data-tab=${tab}]`, { timeout: timeouts.ui });
}

test('the panel opens for a traced snapshot, switches tabs, and a frame click opens the line', { timeout: timeouts.test }, async () => {
  await session.step('open-snapshot', (wb) => wb.openFile('run.json'));
  await session.step('open-panel', (wb) => wb.runCommand('Memlens: Open Memory Report'));
  const panel = await session.step('panel', (wb) => wb.waitForWebview('Peak', EXTENSION));
  await panel.waitForSelector('body[data-validated]', { timeout: timeouts.ui });
  assert.match((await panel.textContent('#summary-peak')) ?? '', /[KMG]iB$/);
  await session.capture('01-phases');

  for (const tab of ['timeline', 'modules', 'table']) {
    await session.step(`tab-${tab}`, () => showTab(panel, tab));
    await session.capture(`02-${tab}`);
  }
  // The largest tensor with a user frame, opened in Tensor details by a double click.
  const row = panel.locator('.virtual-layer .trow', { has: panel.locator('.col-module', { hasText: /mlp|attn/ }) }).first();
  await session.step('details', async () => {
    await row.dblclick();
    await panel.waitForSelector('body[data-tab=details] #stack-frames li.frame a', { timeout: timeouts.ui });
  });
  await session.capture('03-details');

  const link = panel.locator('#stack-frames li.frame a').first();
  const file = (await link.getAttribute('data-file'))!;
  const line = Number(await link.getAttribute('data-line'));
  assert.ok(file.startsWith(session.workspace), `${file} is in the workspace`);
  await session.step('click-frame', () => link.click());

  // The editor shows that file, with the cursor on that line.
  await session.step('editor-jumped', async (wb) => {
    await wb.page.locator(`.tabs-container .tab.active[data-resource-name="${path.basename(file)}"]`).waitFor({ timeout: timeouts.ui });
    await wb.page.waitForFunction(
      (expected) => [...document.querySelectorAll('.statusbar-item')].some((el) => (el as HTMLElement).innerText.trim().startsWith(`Ln ${expected},`)),
      line,
      { timeout: timeouts.ui },
    );
  });
  const status = await session.workbench.statusBarItems();
  assert.ok(status.some((s) => s.text.startsWith(`Ln ${line},`)), JSON.stringify(status.map((s) => s.text)));
  await session.capture('04-editor-at-frame');

  // The webview reloads (as when VS Code restores it): tab and tensor come back from setState.
  const tensor = await panel.getAttribute('.tensor-details', 'data-id');
  await session.step('reload-webviews', (wb) => wb.runCommand('Developer: Reload Webviews'));
  const reloaded = await session.step('panel-again', async (wb) => {
    for (const deadline = Date.now() + timeouts.ui; Date.now() < deadline; await wb.page.waitForTimeout(200)) {
      for (const f of wb.webviewFrames(EXTENSION)) {
        if (f !== panel && (await f.$('body[data-validated] .tensor-details').catch(() => null))) return f;
      }
    }
    throw new Error('the panel did not come back after reloading webviews');
  });
  assert.equal(await reloaded.getAttribute('body', 'data-tab'), 'details');
  assert.equal(await reloaded.getAttribute('.tensor-details', 'data-id'), tensor);
  await session.capture('05-after-reload');
});

test('no unexpected errors in the browser, code-server or extension host logs', () => {
  assert.deepEqual(session.unexpectedErrors(), []);
});
