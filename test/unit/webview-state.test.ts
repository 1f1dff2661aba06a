import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { defaultState, restoreState, snapshotKeyOf } from '../../webview/data/state';
import { makeSnapshot } from './snapshotFixture';

test('a saved state comes back for the same snapshot', () => {
  const s = defaultState('k');
  s.tab = 'table';
  s.phase = 1;
  s.table.query = 'attn';
  s.table.selected = [3, 6];
  s.table.sort = { column: 'module', direction: 'asc' };
  s.table.module = { label: 'h.*', modules: [4, 5] };
  s.timeline.range = [10, 20];
  s.timeline.streams = true;
  s.details = { tensor: 6, line: '/a.py:3' };
  assert.deepEqual(restoreState(JSON.parse(JSON.stringify(s)), 'k'), s);
});

test('for another snapshot only the view preferences survive', () => {
  const s = defaultState('k');
  s.tab = 'modules';
  s.phase = 1;
  s.table.selected = [1];
  s.modules.measure = 'category_peaks';
  s.timeline.streams = true;
  const r = restoreState(s, 'other');
  assert.equal(r.timeline.streams, true);
  assert.equal(r.tab, 'modules');
  assert.equal(r.modules.measure, 'category_peaks');
  assert.equal(r.phase, null);
  assert.deepEqual(r.table.selected, []);
  assert.equal(r.snapshotKey, 'other');
});

test('garbage is replaced by defaults, field by field', () => {
  assert.deepEqual(restoreState(undefined, 'k'), defaultState('k'));
  assert.deepEqual(restoreState('x', 'k'), defaultState('k'));
  const r = restoreState({ version: 1, snapshotKey: 'k', tab: '<script>', phase: -3, table: { query: 5, category: 'weights', sort: { column: 'evil', direction: 'up' }, selected: [1, 'a', -2, 2.5] } }, 'k');
  assert.equal(r.tab, 'phases');
  assert.equal(r.phase, null);
  assert.deepEqual(r.table, { ...defaultState('k').table, selected: [1] });
});

test('snapshot keys tell snapshots apart', () => {
  const a = makeSnapshot({ batch: 1 });
  const b = makeSnapshot({ batch: 2 });
  assert.notEqual(snapshotKeyOf(a), snapshotKeyOf(b));
  assert.equal(snapshotKeyOf(a), snapshotKeyOf(makeSnapshot({ batch: 1 })));
});

test('the phases chart starts at the phases\' own scale, the device memory on request', () => {
  assert.equal(defaultState('k').phasesView.budget, false);
  assert.equal(restoreState({ version: 1, snapshotKey: 'k', phasesView: {} }, 'k').phasesView.budget, false);
  assert.equal(restoreState({ version: 1, snapshotKey: 'k', phasesView: { budget: true } }, 'k').phasesView.budget, true);
});
