// The summary's "Compiled regions" in Chromium: a simulated-GPU trace of a compiled attention
// block lists its torch.compile call as the trace ran it, with the snapshot's numbers; a region
// that ran eagerly says why; a snapshot with no compiled region shows no such list.
import { strict as assert } from 'node:assert';
import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { formatBytes } from '../../common/format';
import type { Snapshot } from '../../common/snapshot';
import { assertClean, closeBrowser, compiledSnapshot, gptSnapshot, makeReport, openReport, readSnapshot, reportWith, root, type Opened } from './support';

const out = path.join(root, 'out/test-webview');
const T = { timeout: 240_000 };

after(() => closeBrowser());

const rows = (o: Opened) =>
  o.page.$$eval('#compiled-regions .compiled-region', (items) =>
    items.map((i) => ({
      as: i.getAttribute('data-compiled-as'),
      saved: Number(i.getAttribute('data-saved')),
      place: i.getAttribute('title'),
      text: Array.from(i.children).map((c) => c.textContent ?? ''),
    })),
  );

test('a compiled block: its call, Inductor, one graph, and the bytes it saves against eager', T, async () => {
  // test_compiled_cuda.py derives the saved set: q, k, v (384 KiB), the output (128 KiB),
  // cuDNN's statistics (4 KiB) and its philox seed and offset (16 B); eager saves the same.
  const file = compiledSnapshot();
  const region = readSnapshot(file).meta.compiled_regions![0]!;
  const saved = 2 * 128 * 768 * 2 + 2 * 128 * 256 * 2 + 2 * 4 * 128 * 4 + 16;
  assert.equal(region.saved_bytes, saved);
  const o = await openReport(makeReport(file, path.join(out, 'compiled.html')));
  await o.page.waitForSelector('#compiled-regions');
  const [row, ...more] = await rows(o);
  assert.equal(more.length, 0);
  assert.equal(row!.as, 'inductor');
  assert.equal(row!.saved, saved);
  assert.match(row!.place ?? '', /compiled_sdpa_kwargs\.py:\d+$/);
  assert.deepEqual(row!.text, [
    'torch.compile(Attention, fullgraph=True)',
    'as inductor',
    '1 graph, 0 breaks',
    `saved ${formatBytes(saved)} (eager ${formatBytes(region.eager_saved_bytes)})`,
  ]);
  await assertClean(o);
  await o.context.close();
});

test('a region that ran eagerly says why; a trace with no compiled region lists none', T, async () => {
  const file = compiledSnapshot();
  const page = readFileSync(makeReport(file, path.join(out, 'compiled.html')), 'utf8');
  const eager = readSnapshot(file);
  const region = eager.meta.compiled_regions![0]!;
  Object.assign(region, { compiled_as: 'eager', graphs: 2, graph_breaks: 1, saved_bytes: 0, eager_saved_bytes: 0, eager_because: 'IndexError: tuple index out of range' });
  const eagerFile = path.join(out, 'compiled-eager.html');
  writeFileSync(eagerFile, reportWith(page, { snapshot: eager as Snapshot }));
  const o = await openReport(eagerFile);
  await o.page.waitForSelector('#compiled-regions');
  const [row] = await rows(o);
  assert.deepEqual(row!.text.slice(1), ['as eager', '2 graphs, 1 break', `saved ${formatBytes(0)} (eager ${formatBytes(0)})`, 'eager because IndexError: tuple index out of range']);
  await assertClean(o);
  await o.context.close();
  const cpu = await openReport(makeReport(gptSnapshot(8), path.join(out, 'gpt-b8.html')));
  assert.equal(await cpu.page.$('#compiled-regions'), null);
  await assertClean(cpu);
  await cpu.context.close();
});
