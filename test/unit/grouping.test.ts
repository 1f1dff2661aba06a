import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { groupSnapshots, groupTargets, targetAtLine, type SnapshotEntry } from '../../src/grouping';
import type { Target } from '../../common/protocol';

function entry(p: Partial<SnapshotEntry>): SnapshotEntry {
  return {
    path: '/w/.memlens/GPT/a.json',
    targetKind: 'model',
    targetName: 'GPT',
    targetPath: '/w/model.py',
    created: '2025-01-01T00:00:00+00:00',
    peakBytes: 1,
    peakPhase: null,
    device: 'h100-80gb',
    deviceDisplayName: 'NVIDIA H100',
    deviceTotalBytes: 80 * 2 ** 30,
    worldSize: 1,
    rank: 0,
    ...p,
  };
}

test('snapshots are grouped by target, newest first, groups by their newest', () => {
  const groups = groupSnapshots([
    entry({ path: '/w/.memlens/GPT/1.json', created: '2025-01-01T10:00:00+00:00' }),
    entry({ path: '/w/.memlens/train/1.json', targetKind: 'script', targetName: 'train', targetPath: '/w/train.py', created: '2025-01-02T00:00:00+00:00' }),
    entry({ path: '/w/.memlens/GPT/2.json', created: '2025-01-01T12:00:00+00:00' }),
  ]);
  assert.deepEqual(groups.map((g) => g.label), ['train', 'GPT']);
  assert.deepEqual(groups[1]!.entries.map((e) => e.path), ['/w/.memlens/GPT/2.json', '/w/.memlens/GPT/1.json']);
  assert.equal(groups[1]!.description, 'model');
});

test('two targets with one name are told apart by their path', () => {
  const groups = groupSnapshots([entry({ targetPath: '/w/a/model.py' }), entry({ targetPath: '/w/b/model.py', path: '/w/b.json' })]);
  assert.equal(groups.length, 2);
  assert.deepEqual(groups.map((g) => g.description).sort(), ['model · /w/a/model.py', 'model · /w/b/model.py']);
});

test('ranks of one target stay in one group', () => {
  const groups = groupSnapshots([entry({ rank: 0, worldSize: 8 }), entry({ rank: 7, worldSize: 8, path: '/w/r7.json' })]);
  assert.equal(groups.length, 1);
  assert.equal(groups[0]!.entries.length, 2);
});

function target(p: Partial<Target> & { id: string }): Target {
  return {
    kind: 'model',
    name: p.id,
    uri: 'file:///w/model.py',
    range: { start: { line: 0, character: 0 }, end: { line: 0, character: 5 } },
    detail: '',
    tracing: false,
    ...p,
  };
}

const at = (line: number) => ({ start: { line, character: 0 }, end: { line, character: 5 } });

test('targets group by kind in a fixed order, the active document first', () => {
  const groups = groupTargets(
    [
      target({ id: 'torchrun:x', kind: 'torchrun', name: 'x' }),
      target({ id: 'script:b', kind: 'script', name: 'b' }),
      target({ id: 'model:Z', name: 'Z', uri: 'file:///w/here.py' }),
      target({ id: 'model:A', name: 'A' }),
    ],
    'file:///w/here.py',
  );
  assert.deepEqual(groups.map((g) => g.kind), ['model', 'script', 'torchrun']);
  assert.deepEqual(groups[0]!.targets.map((t) => t.name), ['Z', 'A']);
  assert.equal(groups[0]!.label, 'Model classes');
});

test('the target under the cursor is the nearest one above it', () => {
  const ts = [target({ id: 'a', range: at(10) }), target({ id: 'b', range: at(40) }), target({ id: 'c', uri: 'file:///w/other.py', range: at(1) })];
  assert.equal(targetAtLine(ts, 'file:///w/model.py', 45)?.id, 'b');
  assert.equal(targetAtLine(ts, 'file:///w/model.py', 39)?.id, 'a');
  assert.equal(targetAtLine(ts, 'file:///w/model.py', 10)?.id, 'a');
  assert.equal(targetAtLine(ts, 'file:///w/model.py', 2), undefined, 'above all of several: ask');
  assert.equal(targetAtLine(ts, 'file:///w/other.py', 0)?.id, 'c', 'above the only one: that one');
  assert.equal(targetAtLine(ts, 'file:///w/none.py', 3), undefined);
});
