import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { downsample, highestRow, timelineColumns } from '../../webview/data/downsample';

const cols = { seq: 0, total: 1 };

/** A noisy sawtooth with one sharp spike: [seq, total, a, b] where a + b = total. */
function series(n: number, spikeAt: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < n; i++) {
    const total = i === spikeAt ? 10_000_000 : ((i * 7919) % 1000) * 100 + (i % 50) * 10;
    out.push([i * 3, total, total - (total >> 2), total >> 2]);
  }
  return out;
}

test('short series come back whole', () => {
  const s = series(50, 10);
  assert.deepEqual(downsample(s, cols, 100), s);
});

test('long series shrink to about the budget and keep the peak, whole rows, in order', () => {
  for (const spike of [0, 1, 4999, 77_777, 99_998, 99_999]) {
    const s = series(100_000, spike);
    const out = downsample(s, cols, 800);
    assert.ok(out.length <= 802, `${out.length} points`);
    assert.deepEqual(highestRow(out, cols), s[spike], `spike at ${spike}`);
    for (let i = 1; i < out.length; i++) assert.ok(out[i]![0]! > out[i - 1]![0]!);
    for (const row of out) assert.equal(row[2]! + row[3]!, row[1]);
    assert.deepEqual(out[0], s[0]);
    assert.deepEqual(out.at(-1), s.at(-1));
  }
});

test('each bucket keeps its lowest and highest point (the envelope)', () => {
  const s = series(10_000, -1);
  const out = downsample(s, cols, 200);
  const lowest = Math.min(...s.map((r) => r[1]!));
  assert.ok(out.some((r) => r[1] === lowest));
  assert.equal(Math.max(...out.map((r) => r[1]!)), Math.max(...s.map((r) => r[1]!)));
});

test('a zoomed range keeps one neighbour on each side and the highest point inside', () => {
  const s = series(100_000, 50_000);
  const out = downsample(s, cols, 400, 120_000, 180_000);
  assert.ok(out[0]![0]! < 120_000 && out[1]![0]! >= 120_000);
  assert.ok(out.at(-1)![0]! > 180_000 && out.at(-2)![0]! <= 180_000);
  assert.deepEqual(highestRow(out, cols), s[50_000]);
  assert.ok(out.length <= 402);
});

test('a range inside one gap still draws the segment that crosses it', () => {
  const s = [[0, 1], [100, 5], [200, 2]];
  assert.deepEqual(downsample(s, cols, 10, 40, 60), [[0, 1], [100, 5]]);
});

test('columns are found by name', () => {
  assert.deepEqual(timelineColumns(['seq', 'total', 'parameter']), { seq: 0, total: 1 });
  assert.equal(timelineColumns(['total']), null);
});
