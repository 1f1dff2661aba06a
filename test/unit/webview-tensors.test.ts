import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { NO_FILTER, TensorText, filterTensors, selectionTotal, sortTensors } from '../../webview/data/tensors';
import { makeSnapshot } from './snapshotFixture';

test('filters by words, category, phase and module', () => {
  const s = makeSnapshot();
  const text = new TensorText(s);
  const all = filterTensors(s, text, NO_FILTER);
  assert.equal(all.length, s.tensors.length);
  const attn = filterTensors(s, text, { ...NO_FILTER, query: 'h.1.ATTN  activ' });
  assert.deepEqual(attn.map((i) => [text.module(i), s.tensors[i]!.category]), [['h.1.attn', 'activation']]);
  const params = filterTensors(s, text, { ...NO_FILTER, category: 'parameter' });
  assert.ok(params.length > 0 && params.every((i) => s.tensors[i]!.category === 'parameter'));
  const setup = filterTensors(s, text, { ...NO_FILTER, phase: 0 });
  assert.ok(setup.every((i) => s.tensors[i]!.phase === 0));
  const lm = s.modules.findIndex((m) => m.fqn === 'lm_head');
  const inLm = filterTensors(s, text, { ...NO_FILTER, modules: new Set([lm]) });
  assert.equal(inLm.length, 2);
  assert.equal(text.module(filterTensors(s, text, { ...NO_FILTER, query: 'randint' })[0]!), '(no module)');
});

test('sorts by any column, stable (ties keep the snapshot order), both directions', () => {
  const s = makeSnapshot();
  const text = new TensorText(s);
  const rows = filterTensors(s, text, NO_FILTER);
  const byBytesAsc = sortTensors(s, text, rows, 'bytes', 'asc').map((i) => s.tensors[i]!.bytes);
  assert.deepEqual(byBytesAsc, [...byBytesAsc].sort((a, b) => a - b));
  const byModule = sortTensors(s, text, rows, 'module', 'asc').map((i) => text.module(i));
  assert.deepEqual(byModule, [...byModule].sort());
  const byCat = sortTensors(s, text, rows, 'category', 'desc').map((i) => s.tensors[i]!.category);
  assert.equal(byCat[0], 'input');
  assert.equal(byCat.at(-1), 'parameter');
  // Sorting does not mutate its input.
  assert.deepEqual(rows, filterTensors(s, text, NO_FILTER));
});

test('the selection total adds up the selected bytes and the peak without them', () => {
  const s = makeSnapshot();
  const pick = [0, 2, 5];
  const total = selectionTotal(s, pick);
  const bytes = pick.reduce((a, i) => a + s.tensors[i]!.bytes, 0);
  assert.equal(total.count, 3);
  assert.equal(total.bytes, bytes);
  assert.equal(total.peakWithout, s.summary.peak_bytes - bytes);
  assert.equal(Object.values(total.byCategory).reduce((a, b) => a + b, 0), bytes);
  assert.equal(selectionTotal(s, [999]).count, 0);
});
