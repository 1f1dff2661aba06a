// Find What Fits in a real VS Code: a workspace whose memlens.toml has a [fit] table (test_fit.py's
// small GPT on 2 GPUs, full recompute, micro-batch 4 and 8 on an h100-94gb); the command from
// the palette, Enter to search the table's space, the progress notification, then the What fits
// panel: micro-batch 4 fits, 8 does not, with the server's bytes formatted.
import { strict as assert } from 'node:assert';
import { copyFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { extensionPython, repoRoot } from './paths';
import { Session } from './session';
import { timeouts } from './timeouts';

const EXTENSION = 'memlens.torch-memory-lens';
let session: Session;

before(async () => {
  session = await Session.start({
    name: 'fit',
    settings: { 'memlens.python': extensionPython(), 'memlens.device': 'h100-94gb' },
    prepare: (ws) => {
      copyFileSync(path.join(repoRoot, 'python/tests/scripts/fit_gpt.py'), path.join(ws, 'fit_gpt.py'));
      writeFileSync(
        path.join(ws, 'memlens.toml'),
        '[fit]\ngpus = "2"\nmicro-batch = "4,8"\nrecompute = "full"\naxis = { micro-batch = "--batch-size", recompute = "--recompute" }\n',
      );
    },
  });
}, { timeout: timeouts.test });

after(async () => {
  await session?.close();
}, { timeout: timeouts.test });

async function waitLong<T>(attempt: () => Promise<T>, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await attempt();
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
  }
}

test('Find What Fits searches the [fit] table and shows the frontier in a panel', { timeout: timeouts.test * 2 }, async () => {
  await session.step('open-script', (wb) => wb.openFile('fit_gpt.py'));
  await session.step('run-command', (wb) => wb.runCommand('Memlens: Find What Fits', { opensInput: true }));
  await session.step('flags-pick', async (wb) => {
    // the script's argparse flags are offered as axes; with a [fit] table none is picked (the
    // box below stays empty)
    const pick = wb.page.locator('.quick-input-widget');
    await pick.locator('.quick-input-title').filter({ hasText: /the script's flags to vary/ }).waitFor({ timeout: timeouts.ui });
    await pick.locator('.monaco-list-row').filter({ hasText: '--batch-size' }).first().waitFor({ timeout: timeouts.ui });
    await session.capture('01-flags');
    await wb.page.keyboard.press('Enter');
  });
  await session.step('space-box', async (wb) => {
    // the input box names the table it found; Enter searches it as it is
    await wb.page.locator('.quick-input-widget .quick-input-message, .quick-input-widget .quick-input-title').filter({ hasText: /memlens\.toml \[fit\]/ }).first().waitFor({ timeout: timeouts.ui });
    assert.equal(await wb.page.locator('.quick-input-widget .quick-input-box input').first().inputValue(), '');
    await session.capture('01-space');
    await wb.page.keyboard.press('Enter');
  });
  // the first point settles after a whole trace (worker start and torch import included):
  // longer than one UI wait on a loaded machine
  await session.step('progress', (wb) => waitLong(() => wb.waitForNotification(/settled/), timeouts.trace));
  await session.capture('02-progress');
  // two traces of ~10 s each, longer on a loaded machine: wait past one UI wait
  const panel = await session.step('panel', (wb) => waitLong(() => wb.waitForWebview('What fits: fit_gpt', EXTENSION), timeouts.trace * 2));
  await panel.waitForSelector('#fit-frontier tbody tr', { timeout: timeouts.ui });
  const keys = await panel.$$eval('#fit-frontier tbody tr', (rows) => rows.map((r) => r.getAttribute('data-key')));
  assert.deepEqual(keys, ['gpus=2,micro-batch=4,recompute=full']);
  const peak = await panel.$eval('#fit-frontier tbody tr td[data-bytes]', (td) => [td.getAttribute('data-bytes'), td.textContent]);
  assert.match(peak[1] ?? '', /^\d+\.\d GiB$/);
  assert.ok(Number(peak[0]) > 50 * 2 ** 30 && Number(peak[0]) < 70 * 2 ** 30, `peak ${peak[0]}`);
  await session.capture('03-frontier');
  // One headroom: the row's is the memory panel's for the same snapshot (device memory minus
  // the reserved peak and what lies outside the allocator, common/headroom.ts and the server)
  const columns = await panel.$$eval('#fit-frontier thead th', (ths) => ths.map((t) => t.textContent));
  const headroom = await panel.$eval(`#fit-frontier tbody tr td:nth-child(${columns.indexOf('headroom') + 1})`, (td) => td.textContent ?? '');
  assert.match(headroom, /^\d+\.\d GiB$/);
  await panel.click('#fit-frontier tbody tr .fit-open');
  await session.step('one-headroom', (wb) => wb.waitForWebview(`fits, ${headroom} headroom`, EXTENSION));
  await session.capture('03b-snapshot-headroom');
  await panel.click('[data-fit-tab=excluded]');
  const reason = await panel.textContent('#fit-excluded tbody tr td.fit-reason');
  assert.match(reason ?? '', /^OOM by \d+\.\d GiB on rank 0/);
  await session.capture('04-excluded');
  assert.deepEqual(session.unexpectedErrors(), []);
});
