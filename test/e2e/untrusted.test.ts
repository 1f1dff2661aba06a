// Restricted Mode (an untrusted workspace): nothing is traced and no server runs, but the
// snapshots already in the workspace can be listed and opened. The workspace is the examples
// copy plus one snapshot (the unit tests' schema-valid fixture) under .memlens/.
import { strict as assert } from 'node:assert';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { makeSnapshot } from '../unit/snapshotFixture';
import { examplesDir, repoPython } from './paths';
import { Session } from './session';
import { timeouts } from './timeouts';

const EXTENSION_ID = 'memlens.torch-memory-lens';
const gptLine = readFileSync(path.join(examplesDir, 'gpt/model.py'), 'utf8').split('\n').findIndex((l) => /^class GPT\b/.test(l)) + 1;

let session: Session;

before(async () => {
  session = await Session.start({
    name: 'untrusted',
    trust: true,
    fixture: examplesDir,
    prepare: (ws) => {
      const dir = path.join(ws, '.memlens', 'train');
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, '20260101-000000-000000.json'), JSON.stringify(makeSnapshot()));
    },
    settings: { 'memlens.python': repoPython(), 'memlens.device': 'cpu' },
  });
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

test('Restricted Mode offers no tracing and explains why', { timeout: timeouts.test }, async () => {
  await session.step('open-model', (wb) => wb.openFile('model.py'));
  await session.step('run-trace', (wb) => wb.runCommand('Memlens: Trace Memory'));
  const note = await session.step('explanation', (wb) => wb.waitForNotification(/Trace Memory is disabled in Restricted Mode/));
  assert.equal(note.severity, 'warning');
  assert.match(note.message, /Tracing runs this workspace's code/);
  await session.step('go-to-class', (wb) => wb.goToLine(gptLine));
  await session.capture('01-trace-refused');
  // No server, so no CodeLens offers a trace either.
  const lenses = await session.workbench.codeLenses();
  assert.deepEqual(lenses, [], 'no CodeLens in Restricted Mode');
  const status = await session.workbench.statusBarItems();
  assert.ok(status.some((s) => s.id.endsWith('memlens.status') && s.text === 'Memlens'), JSON.stringify(status));
});

test('Restricted Mode still lists and opens snapshots', { timeout: timeouts.test }, async () => {
  await session.step('clear-notifications', (wb) => wb.clearNotifications());
  await session.step('open-memory-view', (wb) => wb.openViewContainer('Memory'));
  const rows = await session.step('snapshot-row', (wb) => wb.waitForViewRow('Snapshots', /peak h100-80gb · rank 0\/1/));
  assert.ok(rows.some((r) => r.startsWith('train script')), JSON.stringify(rows));
  await session.step('open-snapshot', async (wb) => {
    await wb.page.locator('.part.sidebar .monaco-list-row', { hasText: 'peak' }).first().click();
  });
  const frame = await session.step('report', (wb) => wb.waitForWebview('Peak', EXTENSION_ID));
  assert.match(await frame.locator('#summary-peak').innerText(), /^\d+(\.\d)? (KiB|MiB)$/);
  await session.capture('02-snapshot-opened');
});

test('no unexpected errors in the browser, code-server or extension host logs', () => {
  assert.deepEqual(session.unexpectedErrors(), []);
});
