import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import * as path from 'node:path';
import { deepChecks, parseSnapshot, validateSnapshot, validateTop } from '../../common/validate';
import { makeSnapshot } from './snapshotFixture';

const root = path.resolve(__dirname, '../../..');

test('a consistent snapshot passes', () => {
  const r = validateSnapshot(makeSnapshot());
  assert.ok(r.ok, r.ok ? '' : r.error);
});

test('the wrong format or version is refused with a message that says so', () => {
  const r1 = validateSnapshot({ format: 'something', version: 1 }, 'x.json');
  assert.deepEqual(r1, { ok: false, error: 'x.json: not a memlens snapshot (expected "format": "memlens.snapshot")' });
  const r2 = validateSnapshot({ ...makeSnapshot(), version: 2 });
  assert.ok(!r2.ok && /version 2 is not supported .* reads version 1/.test(r2.error));
  assert.ok(!validateSnapshot(null).ok);
  assert.ok(!validateSnapshot([]).ok);
});

test('schema errors name the place', () => {
  const s = makeSnapshot() as unknown as { tensors: Record<string, unknown>[] };
  s.tensors[3]!['category'] = 'weights';
  const r = validateSnapshot(s);
  assert.ok(!r.ok);
  assert.match(r.error, /invalid snapshot at tensors\/3\/category: must be equal to one of the allowed values/);
  const t = makeSnapshot() as unknown as { summary: Record<string, unknown> };
  t.summary['peak_bytes'] = -1;
  const r2 = validateSnapshot(t);
  assert.ok(!r2.ok && r2.error.includes('summary/peak_bytes'));
});

test('indices outside their tables are errors, never crashes later', () => {
  const a = makeSnapshot();
  a.tensors[0]!.stack = 99;
  assert.deepEqual(validateSnapshot(a), { ok: false, error: 'snapshot: invalid snapshot at tensors/0: index out of range' });
  const b = makeSnapshot();
  b.stacks.push([7]);
  assert.ok(!validateSnapshot(b).ok);
  const c = makeSnapshot();
  c.summary.peak_tensor = c.tensors.length;
  assert.ok(!validateSnapshot(c).ok);
  const d = makeSnapshot();
  d.timeline.points[1] = [1, 2];
  assert.ok(!validateSnapshot(d).ok);
});

test('bad JSON and truncated files are errors', () => {
  const text = JSON.stringify(makeSnapshot());
  const r = parseSnapshot(text.slice(0, text.length / 2), 'half.json');
  assert.ok(!r.ok && r.error.startsWith('half.json: not valid JSON'));
  assert.ok(parseSnapshot(text).ok);
});

test('the compiled validator matches schema.json', async () => {
  // The generator is an ES module; run it the way the build does.
  const gen = await import(path.join(root, 'scripts/gen-snapshot-validator.mjs'));
  const expected: string = gen.generateValidatorSource();
  const actual = readFileSync(path.join(root, 'common/schema-validator.generated.ts'), 'utf8');
  assert.ok(actual === expected, 'stale: run `node scripts/gen-snapshot-validator.mjs`');
});

test('in two stages: the top part at once, tensors and allocations in slices', () => {
  const s = makeSnapshot();
  (s.tensors[4] as unknown as Record<string, unknown>)['dtype'] = 7;
  const top = validateTop(s);
  assert.ok(top.ok, 'the top part does not look at tensor items');
  const checks = deepChecks(s, 'x.json', 2);
  let yields = 0;
  let step = checks.next();
  while (!step.done) {
    yields++;
    step = checks.next();
  }
  assert.equal(step.value, 'x.json: invalid snapshot at tensors/4/dtype: must be string');
  assert.equal(yields, 2);
  assert.ok(!validateSnapshot(s).ok);
});

test('allocation columns are checked in slices, errors at their real index', () => {
  const s = makeSnapshot();
  const n = 50;
  const col = (v: number) => Array.from({ length: n }, () => v);
  s.allocations = {
    devices: ['cuda:0'], device: col(0), bytes: col(512), requested_bytes: col(500), category: col(4),
    module: col(1), op: col(0), stack: col(1), stream: col(0), alloc_seq: col(1), free_seq: col(-1),
  };
  assert.ok(validateSnapshot(s).ok);
  s.allocations.category[37] = 9;
  const checks = deepChecks(s, 'snapshot', 2);
  let step = checks.next();
  while (!step.done) step = checks.next();
  assert.equal(step.value, 'snapshot: invalid snapshot at allocations/category/37: must be <= 7');
  s.allocations.category[37] = 1;
  s.allocations.op[41] = 3;
  assert.deepEqual(validateSnapshot(s), { ok: false, error: 'snapshot: invalid snapshot at allocations/41: index out of range' });
  s.allocations.op[41] = 0;
  s.allocations.stream.pop();
  assert.match((validateSnapshot(s) as { error: string }).error, /allocations\/stream: 49 entries, expected 50/);
  (s as unknown as Record<string, unknown>)['allocations'] = 'lots';
  assert.match((validateSnapshot(s) as { error: string }).error, /allocations/);
});

test('tensors that are not a list are refused before anything reads them', () => {
  const s = makeSnapshot() as unknown as Record<string, unknown>;
  s['tensors'] = { length: 3 };
  assert.deepEqual(validateTop(s), { ok: false, error: 'snapshot: invalid snapshot at tensors: must be array' });
});
