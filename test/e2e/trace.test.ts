// The packaged extension in a real VS Code, on a copy of the repository's examples/: open the
// example model, trace it from the command palette, and check what a user sees: the annotation
// on the class line, the hover's table, the status bar, the Snapshots tree, the report panel
// (and a click in it opening the source). Then a model that fails: an error diagnostic at the
// failing line, and the extension still traces afterwards.
// The trace targets the CPU (memlens.device = cpu): quick on this GPU-less machine.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { examplesDir, fixturesDir, repoPython } from './paths';
import { Session } from './session';
import { timeouts } from './timeouts';

const EXTENSION_ID = 'memlens.torch-memory-lens';

/** 1-based line of the first line of `file` matching `pattern`. */
function lineOf(file: string, pattern: RegExp): number {
  const i = readFileSync(file, 'utf8').split('\n').findIndex((l) => pattern.test(l));
  if (i < 0) throw new Error(`${file} has no line matching ${pattern}`);
  return i + 1;
}

const modelFile = path.join(examplesDir, 'gpt/model.py');
const gptLine = lineOf(modelFile, /^class GPT\b/);
const blockLine = lineOf(modelFile, /^class Block\b/);
const brokenFile = path.join(fixturesDir, 'broken/broken_model.py');
const brokenClassLine = lineOf(brokenFile, /^class Broken\b/);
const brokenErrorLine = lineOf(brokenFile, /the trace fails here/);

// "12.6 MiB / 23.6 GiB" or "71.3 / 80 GiB" (the codicon is not text; a single-process job
// names no rank)
// A module's annotation: its total, then its activations ("≈ 1.2 MiB · 640.0 KiB act ×2").
const MODEL_TEXT = /^≈ \S+ \S+ · \S+ \S+ act/;
const STATUS = /^(?:.+ · )?(\d+(?:\.\d)?)(?: ([KMGTP]iB|B))? \/ \d+(?:\.\d)? ([KMGTP]iB|B)$/;

let session: Session;

before(async () => {
  session = await Session.start({
    name: 'trace',
    fixture: examplesDir,
    prepare: (ws) => cpSync(path.join(fixturesDir, 'broken'), path.join(ws, 'broken'), { recursive: true }),
    settings: {
      'memlens.python': repoPython(),
      'memlens.device': 'cpu',
      'memlens.traceTimeout': 600,
    },
  });
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

test('Trace Memory on the example model: annotation, hover, status bar, Snapshots tree, report', { timeout: timeouts.test }, async () => {
  await session.step('open-model', (wb) => wb.openFile('model.py'));
  await session.step('go-to-class', (wb) => wb.goToLine(gptLine));
  // The server is up and has found the target once its CodeLens shows.
  await session.step('server-ready', (wb) => wb.waitForCodeLens('Trace Memory'));
  const before = await session.workbench.lineDecorations();
  assert.deepEqual(before, [], 'no annotation before the first trace');
  await session.capture('01-model-before-trace');

  await session.step('run-trace', (wb) => wb.runCommand('Memlens: Trace Memory'));
  const progress = await session.step('progress', (wb) => wb.waitForNotification(/Tracing GPT/));
  assert.equal(progress.source, 'Torch Memory Lens');
  await session.step('placeholder', (wb) => wb.waitForDecoration('≈ tracing…', gptLine));
  await session.capture('02-tracing');
  await session.step('progress-ends', (wb) => wb.waitForNoNotification(/Tracing GPT/, timeouts.trace));

  const decorations = await session.step('annotation', (wb) =>
    wb.waitForDecoration(/^≈ \S+ \S+ · \S+ \S+ act$/, gptLine),
  );
  const classAnnotation = decorations.find((d) => d.line === gptLine)!;
  assert.ok(decorations.length >= 2, `the class and hot lines are annotated: ${JSON.stringify(decorations)}`);
  // The server's CodeLens goes back from "Tracing… (cancel)" and offers the report.
  await session.step('codelens-after-trace', (wb) => wb.waitForCodeLens(/^Open Report \(peak /));
  await session.step('codelens-trace-again', (wb) => wb.waitForCodeLens('Trace Memory'));
  await session.capture('03-annotated');

  const hover = await session.step('hover', (wb) => wb.hoverLine(gptLine));
  assert.match(hover, /class GPT/);
  for (const column of ['per instance', 'at the peak', 'share of peak']) assert.ok(hover.includes(column), `hover table has "${column}": ${hover}`);
  assert.match(hover, /parameters/);
  assert.match(hover, /Peak \S+ \S+ of .* rank 0 of 1/);
  await session.capture('04-hover');
  await session.step('dismiss-hover', (wb) => wb.dismissHover());

  const items = await session.step('status-bar', (wb) => wb.statusBarItems());
  const status = items.find((s) => STATUS.test(s.text));
  assert.ok(status, `a status bar item shows the peak against the budget: ${JSON.stringify(items.map((s) => s.text))}`);
  const peakText = (() => {
    const m = STATUS.exec(status.text)!;
    return `${m[1]} ${m[2] ?? m[3]}`.replace(/^(\d+) /, '$1.0 ');
  })();

  await session.step('open-memory-view', (wb) => wb.openViewContainer('Memory'));
  const rows = await session.step('snapshot-row', (wb) => wb.waitForViewRow('Snapshots', /peak cpu · rank 0\/1 · \d{4}-\d\d-\d\d \d\d:\d\d/));
  assert.ok(rows.some((r) => r.startsWith('GPT')), `a GPT group: ${JSON.stringify(rows)}`);
  assert.ok(rows.some((r) => r.startsWith(`${peakText} peak`)), `the snapshot row shows the status bar's peak ${peakText}: ${JSON.stringify(rows)}`);
  await session.capture('05-snapshots-tree');

  await session.step('open-report', (wb) => wb.runCommand('Memlens: Open Memory Report'));
  const frame = await session.step('report', (wb) => wb.waitForWebview('Peak', EXTENSION_ID));
  assert.equal(await frame.locator('#summary-peak').innerText(), peakText, 'the report shows the same peak');
  await session.capture('06-report');

  // A click on a class in the report opens its definition (an openFile message to the host).
  await session.step('modules-tab', async () => {
    await frame.locator('vscode-tab-header', { hasText: 'Modules' }).first().click();
    await frame.locator('a.file-link', { hasText: /^Block$/ }).first().click({ timeout: timeouts.ui });
  });
  await session.step('source-opened', async (wb) => {
    const deadline = Date.now() + timeouts.ui;
    while ((await wb.cursorLine()) !== blockLine) {
      if (Date.now() > deadline) throw new Error(`the cursor is on line ${await wb.cursorLine()}, not ${blockLine}`);
      await wb.page.waitForTimeout(200);
    }
  });
  await session.capture('07-report-opened-source');
  assert.ok(classAnnotation.text.startsWith('≈'));
});

test('a failing model shows an error at its line, and the extension keeps working', { timeout: timeouts.test }, async () => {
  await session.step('open-broken', (wb) => wb.openFile('broken_model.py'));
  await session.step('go-to-broken-class', (wb) => wb.goToLine(brokenClassLine));
  await session.step('broken-codelens', (wb) => wb.waitForCodeLens('Trace Memory'));
  await session.step('trace-broken', (wb) => wb.runCommand('Memlens: Trace Memory'));
  const note = await session.step('error-notification', async (wb) => {
    await wb.waitForNotification(/Tracing Broken/);
    await wb.waitForNoNotification(/Tracing Broken/, timeouts.trace);
    return wb.waitForNotification(/the trace of Broken failed/);
  });
  assert.equal(note.severity, 'error');
  assert.match(note.message, new RegExp(`broken_model\\.py:${brokenErrorLine}`));
  await session.step('squiggle', (wb) => wb.waitForSquiggle(brokenErrorLine));
  await session.capture('08-broken-model-error');
  const hover = await session.step('error-hover', (wb) => wb.hoverLine(brokenErrorLine));
  assert.match(hover, /RuntimeError: a and b must have same reduction dim/);
  await session.capture('09-broken-model-hover');
  await session.step('dismiss-error-hover', (wb) => wb.dismissHover());
  await session.step('clear-notifications', (wb) => wb.clearNotifications());

  // Still usable: the example traces again, and its second snapshot joins the first.
  await session.step('back-to-model', (wb) => wb.openFile('model.py'));
  await session.step('model-annotation-kept', (wb) => wb.waitForDecoration(MODEL_TEXT));
  await session.step('go-to-gpt', (wb) => wb.goToLine(gptLine));
  await session.step('retrace', (wb) => wb.runCommand('Memlens: Trace Memory'));
  await session.step('retrace-progress', async (wb) => {
    await wb.waitForNotification(/Tracing GPT/);
    await wb.waitForNoNotification(/Tracing GPT/, timeouts.trace);
  });
  const rows = await session.step('two-snapshots', async (wb) => {
    await wb.openViewContainer('Memory');
    const deadline = Date.now() + timeouts.ui;
    for (;;) {
      const all = await wb.viewRows('Snapshots');
      if (all.filter((r) => / peak cpu · rank 0\/1/.test(r)).length >= 2 && all.some((r) => r.startsWith('GPT'))) return all;
      if (Date.now() > deadline) throw new Error(`expected two GPT snapshots: ${JSON.stringify(all)}`);
      await wb.page.waitForTimeout(250);
    }
  });
  assert.ok(rows.some((r) => r.startsWith('GPT')), JSON.stringify(rows));
  await session.step('annotation-after-retrace', (wb) => wb.waitForDecoration(MODEL_TEXT, gptLine));
  await session.capture('10-traced-again');
});

test('a trace can be cancelled from its progress notification', { timeout: timeouts.test }, async () => {
  await session.step('clear-before-cancel', (wb) => wb.clearNotifications());
  await session.step('open-model-for-cancel', (wb) => wb.openFile('model.py'));
  await session.step('go-to-gpt-for-cancel', (wb) => wb.goToLine(gptLine));
  const before = (await session.workbench.viewRows('Snapshots')).length;
  await session.step('trace-to-cancel', (wb) => wb.runCommand('Memlens: Trace Memory'));
  await session.step('cancel', async (wb) => {
    await wb.waitForNotification(/Tracing GPT/);
    await wb.clickNotificationButton(/Tracing GPT/, 'Cancel');
    await wb.waitForNoNotification(/Tracing GPT/, timeouts.trace);
  });
  // The placeholder goes, the last annotation stays, nothing failed and no snapshot was added.
  await session.step('annotation-back', (wb) => wb.waitForDecoration(MODEL_TEXT, gptLine));
  await session.capture('11-cancelled');
  const notes = await session.workbench.notifications();
  assert.ok(!notes.some((n) => /failed/.test(n.message)), JSON.stringify(notes));
  assert.equal((await session.workbench.viewRows('Snapshots')).length, before, 'no new snapshot');
  const status = await session.workbench.statusBarItems();
  assert.ok(status.some((s) => STATUS.test(s.text)), JSON.stringify(status.map((s) => s.text)));
});

test('an edit makes the annotations stale; reverting makes them fresh', { timeout: timeouts.test }, async () => {
  await session.step('open-model-for-edit', (wb) => wb.openFile('model.py'));
  // A new line above the class, as one types it: at the end of the blank line before it.
  await session.step('go-to-line-above', (wb) => wb.goToLine(gptLine - 1));
  await session.step('type', async (wb) => {
    await wb.page.keyboard.press('End');
    await wb.page.keyboard.type('\n# an edit above the class');
  });
  // The annotation moved down with its line, the same number, stale in its style (italics and
  // the stale colour); the hover, not the label, says "edited since trace".
  await session.step('stale', (wb) => wb.waitForDecoration(/^≈ \S+ \S+ · \S+ \S+ act$/, gptLine + 1, true));
  await session.capture('12-stale-after-edit');
  await session.step('revert', (wb) => wb.runCommand('File: Revert File'));
  await session.step('fresh', (wb) => wb.waitForDecoration(/^≈ \S+ \S+ · \S+ \S+ act$/, gptLine, false));
});

test('a budget below the peak turns the status bar warning-coloured and warns on the target', { timeout: timeouts.test }, async () => {
  const settingsFile = path.join(session.workspace, '.vscode', 'settings.json');
  mkdirSync(path.dirname(settingsFile), { recursive: true });
  writeFileSync(settingsFile, JSON.stringify({ 'memlens.budget': '10MiB' }, null, 2));
  const statusSelector = '#workbench\\.parts\\.statusbar .statusbar-item[id$="memlens.status"]';
  await session.step('over-budget-status', (wb) =>
    wb.page.waitForFunction(
      (sel) => {
        const el = document.querySelector(sel) as HTMLElement | null;
        return !!el && / \/ 10 MiB$/.test(el.innerText.trim()) && el.classList.contains('warning-kind');
      },
      statusSelector,
      { timeout: timeouts.ui },
    ),
  );
  // The server warns on the target: a squiggle under the class name, the hover saying by how much.
  await session.step('go-to-gpt-for-budget', (wb) => wb.goToLine(gptLine));
  await session.step('budget-squiggle', (wb) => wb.waitForSquiggle(gptLine, 'warning'));
  await session.capture('13-over-budget');
  const hover = await session.step('budget-hover', (wb) => wb.hoverLine(gptLine, 'GPT'));
  assert.match(hover, /Peak memory \S+ MiB exceeds the budget of 10\.0 MiB/);
  await session.step('dismiss-budget-hover', (wb) => wb.dismissHover());
  writeFileSync(settingsFile, '{}\n');
  await session.step('within-budget-again', (wb) =>
    wb.page.waitForFunction(
      (sel) => {
        const el = document.querySelector(sel) as HTMLElement | null;
        return !!el && / GiB$/.test(el.innerText.trim()) && !el.classList.contains('warning-kind');
      },
      statusSelector,
      { timeout: timeouts.ui },
    ),
  );
});

test('an interpreter without memlens is named in a notification; fixing the setting restarts the server', { timeout: timeouts.test }, async () => {
  // A bare virtual environment: Python, but no memlens and no torch. The workspace's settings
  // (.vscode/settings.json, which VS Code watches) point memlens.python at it.
  const bare = path.join(session.scratch, 'bare-venv');
  execFileSync('python3', ['-m', 'venv', '--without-pip', bare]);
  const settingsFile = path.join(session.workspace, '.vscode', 'settings.json');
  mkdirSync(path.dirname(settingsFile), { recursive: true });
  writeFileSync(settingsFile, JSON.stringify({ 'memlens.python': path.join(bare, 'bin/python') }, null, 2));
  const note = await session.step('missing-memlens', (wb) => wb.waitForNotification(/memlens is not installed in .*bare-venv/));
  assert.equal(note.severity, 'warning');
  const buttons = await session.workbench.page
    .locator('.notifications-toasts .monaco-list-row', { hasText: 'memlens is not installed' })
    .first()
    .locator('.monaco-button')
    .allInnerTexts();
  assert.deepEqual(buttons.map((b) => b.trim()), ['Install memlens into this interpreter', 'Select Interpreter', 'Open Settings']);
  await session.capture('14-interpreter-without-memlens');
  assert.deepEqual(await session.workbench.waitForNoCodeLens(), [], 'no server, no CodeLens');

  // Back to the repository's interpreter: the server restarts, the CodeLens and annotations return.
  writeFileSync(settingsFile, '{}\n');
  await session.step('clear-after-bare', (wb) => wb.clearNotifications());
  await session.step('server-back', (wb) => wb.waitForCodeLens('Trace Memory'));
  await session.step('annotations-back', (wb) => wb.waitForDecoration(MODEL_TEXT, gptLine));
  await session.capture('15-interpreter-restored');
});

test('no unexpected errors in the browser, code-server or extension host logs', () => {
  // VS Code logs every error notification to the console: the failing trace's is expected.
  assert.deepEqual(session.unexpectedErrors([/Memlens: the trace of Broken failed/]), []);
});
