// Fit searches in the Memory view: one node per search, points labelled by their axes and
// ordered by the axes' values as numbers, the largest configurations that fit marked.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { SnapshotEntry } from '../../src/grouping';
import { fitRunDir, fitSearches, parseFitIndex } from '../../src/fitGroups';

const RUN = '/ws/.memlens/fit/train-1e25a0398e';
const MiB = 2 ** 20;

function snapshot(folder: string, peak: number): SnapshotEntry {
  return {
    path: `${RUN}/points/${folder}/snapshot.json`, targetKind: 'script', targetName: 'train.py', targetPath: 'train.py',
    created: '2026-12-02T03:00:00+00:00', peakBytes: peak, peakPhase: null, device: 'a100-40gb',
    deviceDisplayName: 'A100', deviceTotalBytes: 40 * 1024 * MiB, worldSize: 1, rank: 0,
  };
}

// fit.json of a search over micro-batch 32, 64, 16 (the order the user typed) x gpus 1, 2:
// 16 and 32 fit on one GPU, 64 does not (OOM, traced); on two GPUs 64 fits too (traced), so
// 16 and 32 on two GPUs are implied (not traced).
const row = (mb: string, gpus: string, verdict: string, source: string) => ({
  key: `micro-batch=${mb},gpus=${gpus}`, point: { 'micro-batch': mb, gpus }, verdict, source,
  folder: `micro-batch=${mb}_gpus=${gpus}-0000000${mb.length}`, peak_bytes: null,
});
const INDEX = JSON.stringify({
  format: 'memlens.fit', version: 1, target: 'train.py', device: 'a100-40gb', created: '2026-12-02T03:00:00+00:00',
  space: [
    { name: 'micro-batch', values: ['32', '64', '16'], target: '--batch-size', direction: 'up' },
    { name: 'gpus', values: ['1', '2'], target: 'world size', direction: 'down' },
  ],
  rows: [row('32', '1', 'fits', 'traced'), row('64', '1', 'oom', 'traced'), row('16', '1', 'fits', 'implied'),
    row('32', '2', 'fits', 'implied'), row('64', '2', 'fits', 'traced'), row('16', '2', 'fits', 'implied')],
});

test('a fit.json and a point snapshot belong to their run folder; other files to none', () => {
  assert.equal(fitRunDir(`${RUN}/fit.json`), RUN);
  assert.equal(fitRunDir(`${RUN}/points/gpus=1-fc238be0/snapshot.json`), RUN);
  assert.equal(fitRunDir(`${RUN}/points/gpus=1-fc238be0/result.json`), undefined);
  assert.equal(fitRunDir('/ws/.memlens/script-train.py-64549f96/20261202-022731-614256.json'), undefined);
  assert.equal(parseFitIndex('{"format": "memlens.snapshot"}'), undefined);
});

test('one node per search: points by axis values in numeric order, the frontier marked', () => {
  const index = parseFitIndex(INDEX)!;
  const traced = [snapshot('micro-batch=32_gpus=1-00000002', 30 * MiB), snapshot('micro-batch=64_gpus=1-00000002', 60 * MiB),
    snapshot('micro-batch=64_gpus=2-00000002', 35 * MiB)];
  const [search, ...others] = fitSearches(traced, new Map([[RUN, index]]));
  assert.equal(others.length, 0);
  assert.equal(search!.label, 'Find What Fits: train.py');
  // micro-batch 16 < 32 < 64 as numbers (not 32, 64, 16 as typed), then gpus 1 < 2
  assert.deepEqual(search!.points.map((p) => p.label), [
    'micro-batch=16, gpus=1', 'micro-batch=16, gpus=2', 'micro-batch=32, gpus=1',
    'micro-batch=32, gpus=2', 'micro-batch=64, gpus=1', 'micro-batch=64, gpus=2',
  ]);
  // Fitting points that no other fitting point outgrows on every axis (micro-batch up, gpus
  // down: fewer GPUs need more each): 32 on one GPU (64 on one is OOM) and 64 on two.
  // 16 on one GPU is outgrown by 32 on one; 32 on two by 32 on one and by 64 on two.
  assert.deepEqual(search!.points.filter((p) => p.frontier).map((p) => p.label), ['micro-batch=32, gpus=1', 'micro-batch=64, gpus=2']);
  assert.equal(search!.description, 'a100-40gb · 6 points · fits up to micro-batch=32, gpus=1; micro-batch=64, gpus=2');
  // traced points open their snapshot; implied ones have none
  assert.deepEqual(search!.points.map((p) => p.entry?.peakBytes ?? null), [null, null, 30 * MiB, null, 60 * MiB, 35 * MiB]);
});

test('a search still running (no fit.json yet): its traced points, from their folders', () => {
  const [search] = fitSearches([snapshot('micro-batch=64-aaaaaaaa', 60 * MiB), snapshot('micro-batch=8-bbbbbbbb', 8 * MiB)], new Map());
  assert.deepEqual(search!.points.map((p) => [p.label, p.frontier]), [['micro-batch=8', false], ['micro-batch=64', false]]);
  assert.equal(search!.description, '2 points');
});
