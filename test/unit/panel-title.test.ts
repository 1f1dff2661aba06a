import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { fileTitle, panelTitle } from '../../src/panel/title';
import { makeSnapshot } from './snapshotFixture';

const FILE = '/ws/.memlens/model-GPT-9dba7ffc/20260101-120000-000000.json';

test('the panel is titled by the traced target and its device, not the snapshot folder', () => {
  const snapshot = makeSnapshot();
  snapshot.meta.target = { kind: 'model', name: 'GPT', path: 'model.py', args: [], cwd: null };
  assert.equal(panelTitle(snapshot, FILE), 'Memory: GPT · h100-80gb');
});

test('a rank of a distributed job says which rank', () => {
  const snapshot = makeSnapshot();
  snapshot.meta.world_size = 8;
  snapshot.meta.rank = 3;
  assert.equal(panelTitle(snapshot, FILE), 'Memory: train · rank 3 of 8 · h100-80gb');
});

test('an untrusted name stays on one short line', () => {
  const snapshot = makeSnapshot();
  snapshot.meta.target = { kind: 'script', name: `a\n\tb ${'x'.repeat(100)}`, path: 'a.py', args: [], cwd: null };
  const title = panelTitle(snapshot, FILE);
  assert.match(title, /^Memory: a b x+… · h100-80gb$/);
  assert.ok(title.length < 80);
});

test('without a target name, the file under its folder', () => {
  assert.equal(panelTitle({ meta: { target: { name: '  ' } } }, FILE), 'Memory: model-GPT-9dba7ffc/20260101-120000-000000');
  assert.equal(panelTitle(null, FILE), fileTitle(FILE));
  assert.equal(fileTitle('/ws/.memlens/run.json'), 'Memory: run');
});
