import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { isSnapshotPath, readSnapshotEntry } from '../../src/snapshotFile';
import { makeSnapshot } from './snapshotFixture';

test('a valid snapshot gives the entry a list shows', () => {
  const snap = makeSnapshot();
  const r = readSnapshotEntry(JSON.stringify(snap), '/w/.memlens/train/1.json');
  assert.ok(r.ok, r.ok ? '' : r.error);
  assert.deepEqual(r.entry, {
    path: '/w/.memlens/train/1.json',
    targetKind: 'script',
    targetName: 'train',
    targetPath: 'train.py',
    created: '2026-01-01T00:00:00+00:00',
    peakBytes: snap.summary.peak_bytes,
    peakPhase: 'forward_backward_iter_0',
    device: 'h100-80gb',
    deviceDisplayName: 'NVIDIA H100 80GB',
    deviceTotalBytes: 80 * 2 ** 30,
    worldSize: 1,
    rank: 0,
  });
});

test('truncated, foreign and future files are errors with a message, never exceptions', () => {
  const text = JSON.stringify(makeSnapshot());
  const cases: [string, RegExp][] = [
    [text.slice(0, text.length / 2), /not valid JSON/],
    ['{"format": "something.else", "version": 1}', /not a memlens snapshot/],
    [JSON.stringify({ ...makeSnapshot(), version: 99 }), /version/],
    ['[]', /not a memlens snapshot/],
    ['null', /not a memlens snapshot/],
  ];
  for (const [input, message] of cases) {
    const r = readSnapshotEntry(input, '/w/.memlens/x/1.json');
    assert.equal(r.ok, false, input.slice(0, 40));
    if (!r.ok) assert.match(r.error, message);
  }
});

test('a snapshot that breaks the schema or its own tables is refused', () => {
  const noPeak = makeSnapshot() as unknown as { summary: Record<string, unknown> };
  delete noPeak.summary['peak_bytes'];
  assert.equal(readSnapshotEntry(JSON.stringify(noPeak), 'a.json').ok, false);
  const badIndex = makeSnapshot();
  badIndex.stacks[1] = [99];
  assert.equal(readSnapshotEntry(JSON.stringify(badIndex), 'a.json').ok, false);
  const hostile = makeSnapshot() as unknown as { meta: { device: unknown } };
  hostile.meta.device = '<img src=x onerror=alert(1)>';
  assert.equal(readSnapshotEntry(JSON.stringify(hostile), 'a.json').ok, false);
});

test('snapshot paths live under .memlens, temporary dot files excepted', () => {
  assert.ok(isSnapshotPath('/w/.memlens/GPT/20250101-000000.json'));
  assert.ok(isSnapshotPath('C:\\w\\.memlens\\GPT\\1.json'));
  assert.ok(!isSnapshotPath('/w/.memlens/GPT/.1.json'));
  assert.ok(!isSnapshotPath('/w/memlens/GPT/1.json'));
  assert.ok(!isSnapshotPath('/w/.memlens/GPT/1.json.tmp'));
});
