import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { compareSnapshots } from '../../webview/data/compare';
import { makeSnapshot } from './snapshotFixture';

test('the peak delta is b − a', () => {
  const a = makeSnapshot({ batch: 8 });
  const b = makeSnapshot({ batch: 16 });
  const c = compareSnapshots(a, b);
  assert.equal(c.peak.a, a.summary.peak_bytes);
  assert.equal(c.peak.b, b.summary.peak_bytes);
  assert.equal(c.peak.delta, b.summary.peak_bytes - a.summary.peak_bytes);
  assert.ok(c.peak.delta > 0);
});

test('categories, modules and groups are sorted by absolute change', () => {
  const c = compareSnapshots(makeSnapshot({ batch: 16 }), makeSnapshot({ batch: 8 }));
  for (const list of [c.categoriesAtPeak, c.modules, c.groups]) {
    for (let i = 1; i < list.length; i++) {
      assert.ok(Math.abs(list[i - 1]!.delta) >= Math.abs(list[i]!.delta));
    }
  }
  assert.equal(c.categoriesAtPeak[0]!.key, 'activation');
  assert.ok(c.categoriesAtPeak[0]!.delta < 0);
  const params = c.categoriesAtPeak.find((d) => d.key === 'parameter')!;
  assert.equal(params.delta, 0);
});

test('groups merge repeated layers; modules present on one side only keep a null', () => {
  const a = makeSnapshot({ layers: 2 });
  const b = makeSnapshot({ layers: 3 });
  const c = compareSnapshots(a, b);
  const blocks = c.groups.find((g) => g.key === 'h.*')!;
  assert.equal(blocks.countA, 2);
  assert.equal(blocks.countB, 3);
  const sum = (s: typeof a) => s.modules.filter((m) => m.group === 'h.*').reduce((x, m) => x + Object.values(m.at_peak).reduce((p, q) => p + q, 0), 0);
  assert.equal(blocks.delta, sum(b) - sum(a));
  const added = c.modules.find((m) => m.key === 'h.2')!;
  assert.equal(added.a, null);
  assert.equal(added.delta, added.b);
  assert.equal(c.modules.find((m) => m.key === '')!.label, '(GPT)');
});

test('phases match by name and device', () => {
  const a = makeSnapshot({ batch: 1 });
  const b = makeSnapshot({ batch: 2 });
  b.phases.push({ ...b.phases[1]!, name: 'eval' });
  const c = compareSnapshots(a, b);
  assert.equal(c.phases.length, 4);
  const fb = c.phases.find((p) => p.name === 'forward_backward_iter_0')!;
  assert.equal(fb.peak.delta, b.phases[1]!.peak_bytes - a.phases[1]!.peak_bytes);
  const ev = c.phases.find((p) => p.name === 'eval')!;
  assert.equal(ev.a, null);
  assert.equal(c.phases[0]!.name, 'eval');
});

test('meta differences name what changed', () => {
  const c = compareSnapshots(makeSnapshot({ batch: 8 }), makeSnapshot({ batch: 16 }));
  assert.deepEqual(c.meta, [{ field: 'arguments', a: '--batch-size=8', b: '--batch-size=16' }]);
});
