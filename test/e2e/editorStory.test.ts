// The editor tells one story (issue 27), in a real VS Code: the walkthrough opens; with the
// memlens.device setting unset, the recipe's `device = "a100-40gb"` is the device traced, in
// the status bar and the report; at 1280 px with the report beside the editor, every inline
// label is at most 40 characters and starts with the total.
import { strict as assert } from 'node:assert';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { examplesDir, repoPython } from './paths';
import { Session } from './session';
import { timeouts } from './timeouts';

const EXTENSION_ID = 'memlens.torch-memory-lens';
const MAX_LABEL = 40;
const modelFile = path.join(examplesDir, 'gpt/model.py');
const gptLine = readFileSync(modelFile, 'utf8').split('\n').findIndex((l) => /^class GPT\b/.test(l)) + 1;

let session: Session;

before(async () => {
  session = await Session.start({
    name: 'editor-story',
    fixture: examplesDir,
    prepare: (ws) => {
      const recipe = path.join(ws, 'gpt', 'memlens.toml');
      writeFileSync(recipe, `device = "a100-40gb"\n${readFileSync(recipe, 'utf8')}`);
    },
    // No memlens.device: the recipe's device must win over the setting's absence.
    settings: { 'memlens.python': repoPython(), 'memlens.traceTimeout': 600 },
  });
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

test('the walkthrough opens', { timeout: timeouts.test }, async () => {
  await session.step('open-walkthrough', (wb) => wb.runCommand('Welcome: Open Walkthrough...', { opensInput: true }));
  await session.step('pick-walkthrough', async (wb) => {
    const row = wb.page.locator('.quick-input-widget .monaco-list-row').filter({ hasText: 'Get started with Torch Memory Lens' }).first();
    await row.waitFor({ timeout: timeouts.ui });
    await row.click();
  });
  await session.step('walkthrough-shown', (wb) =>
    wb.page.locator('.part.editor').filter({ hasText: 'Get started with Torch Memory Lens' }).first().waitFor({ timeout: timeouts.ui }),
  );
  await session.capture('01-walkthrough');
  await session.step('close-walkthrough', (wb) => wb.runCommand('View: Close All Editors'));
});

test("a recipe's device is the traced device, and labels stay short beside the report at 1280 px", { timeout: timeouts.test * 2 }, async () => {
  await session.step('viewport-1280', (wb) => wb.page.setViewportSize({ width: 1280, height: 900 }));
  await session.step('open-model', (wb) => wb.openFile('model.py'));
  await session.step('go-to-class', (wb) => wb.goToLine(gptLine));
  await session.step('server-ready', (wb) => wb.waitForCodeLens('Trace Memory'));
  await session.step('trace', (wb) => wb.runCommand('Memlens: Trace Memory'));
  await session.step('annotation', (wb) => wb.waitForDecoration(/^≈ \d/, gptLine));
  const status = await session.step('status-a100', (wb) =>
    wb.page.waitForFunction(() => {
      const item = document.querySelector('#workbench\\.parts\\.statusbar .statusbar-item[id$="memlens.status"]') as HTMLElement | null;
      const text = item?.innerText.trim() ?? '';
      return /^GPT · .+ \/ 40(\.0)? GiB$/.test(text) ? text : false;
    }, undefined, { timeout: timeouts.trace }).then((h) => h.jsonValue() as Promise<string>),
  );
  assert.match(status, /\/ 40(\.0)? GiB$/, `the budget is the A100 40GB's memory: ${status}`);

  await session.step('open-report', (wb) => wb.runCommand('Memlens: Open Memory Report'));
  const frame = await session.step('report', (wb) => wb.waitForWebview('Peak', EXTENSION_ID));
  const header = await frame.locator('#summary-peak').locator('xpath=..').innerText();
  assert.match(header, /A100/, `the report names the recipe's device: ${header}`);
  await session.step('back-to-model', (wb) => wb.runCommand('View: Focus First Editor Group'));
  const labels = await session.step('labels-beside-report', (wb) => wb.waitForDecoration(/^≈ \d/, gptLine));
  await session.capture('02-labels-beside-report-1280');
  assert.ok(labels.length > 0);
  for (const d of labels) {
    assert.ok(d.text.length <= MAX_LABEL, `${JSON.stringify(d.text)} is ${d.text.length} characters`);
    assert.match(d.text, /^≈ \d+(\.\d)? (B|KiB|MiB|GiB)\b/, `the total comes first: ${d.text}`);
  }

  // The same limit in the inlay-hint style (the server's hints, drawn by VS Code)
  const settingsFile = path.join(session.workspace, '.vscode', 'settings.json');
  mkdirSync(path.dirname(settingsFile), { recursive: true });
  writeFileSync(settingsFile, JSON.stringify({ 'memlens.annotations.style': 'inlayHints' }, null, 2));
  const hints = await session.step('inlay-hints', (wb) =>
    wb.waitForInlayHint(/^≈ \d/, gptLine));
  await session.capture('03-inlay-hints-beside-report-1280');
  for (const h of hints) {
    assert.ok(h.text.length <= MAX_LABEL, `${JSON.stringify(h.text)} is ${h.text.length} characters`);
    assert.match(h.text, /^≈ \d+(\.\d)? (B|KiB|MiB|GiB)\b/, `the total comes first: ${h.text}`);
  }
  writeFileSync(settingsFile, '{}\n');
});
