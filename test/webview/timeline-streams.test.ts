// The timeline's reserved memory per stream in Chromium: a simulated-GPU trace with two streams
// offers the control and draws a line per stream, named as the snapshot names them, with the
// snapshot's numbers; a snapshot with one stream (or none, a CPU trace) offers no control.
import { strict as assert } from 'node:assert';
import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { formatBytes } from '../../common/format';
import type { Snapshot } from '../../common/snapshot';
import { assertClean, closeBrowser, cudaStreamsSnapshot, gptSnapshot, makeReport, openReport, readSnapshot, reportWith, root, screenshot, showTab, type Opened } from './support';

const out = path.join(root, 'out/test-webview');
const T = { timeout: 240_000 };
const MiB = 1 << 20;

after(() => closeBrowser());

const legendItems = (o: Opened) =>
  o.page.$$eval('#timeline-streams-legend .legend-item', (items) =>
    items.map((i) => [Number(i.getAttribute('data-stream')), i.children[1]?.textContent ?? '', Number(i.getAttribute('data-bytes')), i.children[2]?.textContent ?? '']),
  );

test('two streams: a control shows a reserved line per stream, named and valued as the snapshot says', T, async () => {
  // python/tests/scripts/cuda_streams.py (see test_distributed_streams.py): the default stream
  // ends with five 12 MiB segments, a 2 MiB small-pool segment and a 32 MiB cuBLAS workspace,
  // 94 MiB; `side` with one 12 MiB segment, a small segment and a workspace, 46 MiB. Nothing is
  // released, so each line's highest is where it ends.
  const file = cudaStreamsSnapshot();
  const snap = readSnapshot(file);
  assert.deepEqual(snap.timeline.streams?.map((s) => [s.id, s.name]), [[0, 'default stream'], [1, 'side']]);
  const o = await openReport(makeReport(file, path.join(out, 'cuda-streams-timeline.html')));
  await showTab(o.page, 'timeline');
  await o.page.waitForSelector('#timeline-streams');
  assert.equal(await o.page.$('#timeline-streams-legend'), null, 'off until asked for');
  await o.page.click('#timeline-streams');
  await o.page.waitForSelector('#timeline-streams-legend .legend-item');
  assert.deepEqual(await legendItems(o), [
    [0, 'reserved: default stream', 94 * MiB, `highest ${formatBytes(94 * MiB)}`],
    [1, 'reserved: side', 46 * MiB, `highest ${formatBytes(46 * MiB)}`],
  ]);
  const title = await o.page.getAttribute('#timeline-streams-legend [data-stream="1"]', 'title');
  assert.match(title ?? '', /cuda_streams\.py:18$/);
  // The lines are datasets of the chart (drawn on the canvas: see the screenshot); hovering the
  // last event shows both streams and the total reserved, 140 MiB.
  const box = (await o.page.locator('#timeline-chart').boundingBox())!;
  await o.page.mouse.move(box.x + box.width - 12, box.y + box.height * 0.4);
  await screenshot(o.page, 'dark-timeline-streams');
  // The choice is kept across a reload, like the other timeline settings.
  await o.page.reload();
  await o.page.waitForSelector('body[data-validated]');
  await showTab(o.page, 'timeline');
  await o.page.waitForSelector('#timeline-streams-legend .legend-item');
  assert.equal((await legendItems(o)).length, 2);
  // Turned off, the lines and their legend go.
  await o.page.click('#timeline-streams');
  await o.page.waitForSelector('#timeline-streams-legend', { state: 'detached' });
  await assertClean(o);
  await o.context.close();
});

test('one stream, or a CPU trace: no per-stream control', T, async () => {
  const file = cudaStreamsSnapshot();
  const page = readFileSync(makeReport(file, path.join(out, 'cuda-streams-timeline.html')), 'utf8');
  const one = readSnapshot(file);
  one.timeline.streams = one.timeline.streams!.slice(0, 1);
  const oneFile = path.join(out, 'cuda-one-stream.html');
  writeFileSync(oneFile, reportWith(page, { snapshot: one as Snapshot }));
  const cpu = makeReport(gptSnapshot(8), path.join(out, 'gpt-b8.html'));
  for (const report of [oneFile, cpu]) {
    const o = await openReport(report);
    await showTab(o.page, 'timeline');
    await o.page.waitForSelector('#timeline-chart');
    await o.page.waitForSelector('#timeline-budget');
    assert.equal(await o.page.$('#timeline-streams'), null, report);
    await assertClean(o);
    await o.context.close();
  }
});
