// One trace per editor, in a real VS Code (issue 27): the example model traced from its recipe,
// then a small training script that imports it traced too. model.py now has two traces; the
// status bar, the CodeLens, the inline numbers and the hover all name the one the server shows
// (the newest), and Memlens: Choose Trace switches all of them to the recipe's. Then a Find
// What Fits search in the Memory view: one node, its points in numeric order, the largest that
// fits starred, no "unreadable" row.
// The traces target the CPU (memlens.device = cpu): quick on this GPU-less machine.
import { strict as assert } from 'node:assert';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { examplesDir, repoPython } from './paths';
import { Session } from './session';
import { timeouts } from './timeouts';
import type { Workbench } from './workbench';

const modelFile = path.join(examplesDir, 'gpt/model.py');
const gptLine = readFileSync(modelFile, 'utf8').split('\n').findIndex((l) => /^class GPT\b/.test(l)) + 1;

// A script of the same model, smaller than the recipe's (its numbers differ from the recipe's).
const SCRIPT = `import torch

from model import GPT

model = GPT(n_layer=1, block_size=64, n_head=2, n_embd=64, vocab_size=512)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(2):
    idx = torch.randint(0, 512, (4, 64))
    loss = model(idx, idx)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
`;

let session: Session;

before(async () => {
  session = await Session.start({
    name: 'one-trace',
    fixture: examplesDir,
    prepare: (ws) => writeFileSync(path.join(ws, 'gpt', 'train_small.py'), SCRIPT),
    settings: {
      'memlens.python': repoPython(),
      'memlens.device': 'cpu',
      'memlens.traceTimeout': 600,
      'workbench.view.alwaysShowHeaderActions': true, // the Memory view's Refresh button
    },
  });
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

/** The status bar item of memlens once it names `target`: "target · 1.2 MiB / 23.6 GiB". */
async function statusNaming(wb: Workbench, target: string): Promise<{ text: string; peak: string }> {
  const sel = '#workbench\\.parts\\.statusbar .statusbar-item[id$="memlens.status"]';
  const handle = await wb.page.waitForFunction(
    ({ sel, target }) => {
      const t = (document.querySelector(sel) as HTMLElement | null)?.innerText.trim() ?? '';
      return t.startsWith(`${target} · `) ? t : false;
    },
    { sel, target },
    { timeout: timeouts.trace },
  );
  const text = (await handle.jsonValue()) as string;
  // "1.2 MiB / 23.6 GiB", or "1.2 / 2 GiB" when the units agree
  const m = /· (\d+(?:\.\d)?)(?: (\S+))? \/ \S+ (\S+)$/.exec(text)!;
  return { text, peak: `${m[1]} ${m[2] ?? m[3]}` };
}

test('after a recipe trace and a script trace of model.py, every view names the same trace', { timeout: timeouts.test * 2 }, async () => {
  await session.step('open-model', (wb) => wb.openFile('model.py'));
  await session.step('go-to-class', (wb) => wb.goToLine(gptLine));
  await session.step('server-ready', (wb) => wb.waitForCodeLens('Trace Memory'));
  await session.step('trace-recipe', (wb) => wb.runCommand('Memlens: Trace Memory'));
  const recipeDecorations = await session.step('recipe-annotation', (wb) => wb.waitForDecoration(/^≈ \d/, gptLine));
  const recipeText = recipeDecorations.find((d) => d.line === gptLine)!.text;
  const recipe = await session.step('recipe-status', (wb) => statusNaming(wb, 'GPT'));
  await session.step('recipe-codelens', (wb) => wb.waitForCodeLens(`Open Report (peak ${recipe.peak})`));

  await session.step('open-script', (wb) => wb.openFile('train_small.py'));
  await session.step('script-ready', (wb) => wb.waitForCodeLens('Trace Memory'));
  await session.step('trace-script', (wb) => wb.runCommand('Memlens: Trace Memory'));
  await session.step('script-status', (wb) => statusNaming(wb, 'train_small'));

  // Back in model.py: the newest trace covering it is the script's, everywhere.
  await session.step('back-to-model', (wb) => wb.openFile('model.py'));
  await session.step('go-to-class-again', (wb) => wb.goToLine(gptLine));
  const script = await session.step('model-status-script', (wb) => statusNaming(wb, 'train_small'));
  assert.notEqual(script.peak, recipe.peak, 'the two traces differ, or this test could not tell them apart');
  const lenses = await session.step('model-codelens-script', (wb) => wb.waitForCodeLens(`Showing train_small (peak ${script.peak})`));
  assert.ok(lenses.includes('Show Its Trace'), `the recipe's trace is offered without a number: ${JSON.stringify(lenses)}`);
  assert.ok(!lenses.some((l) => l.includes(recipe.peak)), `no CodeLens shows the other trace's peak: ${JSON.stringify(lenses)}`);
  const scriptDecorations = await session.step('model-annotation-script', (wb) =>
    wb.waitForDecoration(new RegExp(`^(?!${recipeText.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$)≈ \\d`), gptLine),
  );
  const hover = await session.step('model-hover-script', (wb) => wb.hoverLine(gptLine, 'GPT'));
  assert.match(hover, /script train_small · traced/, `the hover's footer names the trace: ${hover}`);
  await session.step('dismiss-hover', (wb) => wb.dismissHover());
  await session.capture('01-model-shows-script-trace');

  // Choose Trace: the recipe's trace annotates model.py again, in every view.
  await session.step('choose-trace', (wb) => wb.runCommand('Memlens: Choose Trace', { opensInput: true }));
  await session.step('pick-recipe', async (wb) => {
    const row = wb.page.locator('.quick-input-widget .monaco-list-row').filter({ hasText: /GPT · / }).first();
    await row.waitFor({ timeout: timeouts.ui });
    await session.capture('02-choose-trace');
    await row.click();
  });
  const chosen = await session.step('model-status-recipe', (wb) => statusNaming(wb, 'GPT'));
  assert.equal(chosen.peak, recipe.peak);
  await session.step('model-codelens-recipe', (wb) => wb.waitForCodeLens(`Open Report (peak ${recipe.peak})`));
  await session.step('model-annotation-recipe', (wb) => wb.waitForDecoration(recipeText, gptLine));
  const hover2 = await session.step('model-hover-recipe', (wb) => wb.hoverLine(gptLine, 'GPT'));
  assert.match(hover2, /model GPT · traced/, `the hover's footer names the chosen trace: ${hover2}`);
  await session.step('dismiss-hover-2', (wb) => wb.dismissHover());
  assert.ok(scriptDecorations.length > 0);
  await session.capture('03-model-shows-chosen-recipe-trace');
});

test('a fit search is one node of the Memory view: points by axis values, the largest that fits starred', { timeout: timeouts.test }, async () => {
  // A search over micro-batch typed as 32,64,16: 16 and 32 fit, 64 does not. Its points'
  // snapshots are copies of the script's trace (the view reads them as any snapshot).
  const memlens = path.join(session.workspace, '.memlens');
  const scriptDir = readdirSync(memlens).find((d) => d.startsWith('script-train_small'))!;
  const snapshot = path.join(memlens, scriptDir, readdirSync(path.join(memlens, scriptDir)).find((f) => f.endsWith('.json'))!);
  const run = path.join(memlens, 'fit', 'train_small-0123456789');
  const rows = ['32', '64', '16'].map((mb, i) => {
    const folder = `micro-batch=${mb}-0000000${i}`;
    mkdirSync(path.join(run, 'points', folder), { recursive: true });
    copyFileSync(snapshot, path.join(run, 'points', folder, 'snapshot.json'));
    writeFileSync(path.join(run, 'points', folder, 'result.json'), '{}\n');
    const verdict = mb === '64' ? 'oom' : 'fits';
    return { key: `micro-batch=${mb}`, point: { 'micro-batch': mb }, gpus: 1, folder, verdict, source: 'traced', snapshot: 'snapshot.json' };
  });
  writeFileSync(path.join(run, 'fit.json'), JSON.stringify({
    format: 'memlens.fit', version: 1, fingerprint: '0', target: 'train_small', device: 'cpu', created: new Date().toISOString(),
    space: [{ name: 'micro-batch', values: ['32', '64', '16'], target: '--batch-size', direction: 'up' }], rows,
  }));
  await session.step('open-memory-view', (wb) => wb.openViewContainer('Memory'));
  // What the server does not write, the file watcher reports (when the machine has watches to
  // spare); the view's Refresh button reads the folder at once.
  await session.step('refresh-view', (wb) => wb.page.locator('.part.sidebar [aria-label^="Refresh Snapshots"]').first().click());
  await session.step('fit-node', (wb) => wb.waitForViewRow('Snapshots', /^Find What Fits: train_small cpu · 3 points · fits up to micro-batch=32$/));
  await session.step('expand-fit-node', async (wb) => {
    await wb.page.locator('.part.sidebar .monaco-list-row').filter({ hasText: 'Find What Fits: train_small' }).first().click();
  });
  const shown = await session.step('fit-points', (wb) => wb.waitForViewRow('Snapshots', /^micro-batch=64 /));
  const points = shown.filter((r) => r.startsWith('micro-batch='));
  assert.deepEqual(points.map((r) => r.split(' ')[0]), ['micro-batch=16', 'micro-batch=32', 'micro-batch=64']);
  assert.match(points[1]!, /\S+ \S+ peak · fits · ★ largest that fits$/);
  assert.match(points[2]!, / · OOM$/);
  assert.ok(!points[0]!.includes('★'), points[0]);
  assert.ok(!shown.some((r) => /unreadable/.test(r)), `no unreadable row: ${JSON.stringify(shown)}`);
  await session.capture('04-fit-search-node');
  assert.deepEqual(session.unexpectedErrors(), []);
});
