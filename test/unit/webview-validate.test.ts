import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import * as path from 'node:path';
import { parseSnapshot, validateSnapshot } from '../../webview/data/validate';
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
  const actual = readFileSync(path.join(root, 'webview/data/schema-validator.generated.ts'), 'utf8');
  assert.ok(actual === expected, 'stale: run `node scripts/gen-snapshot-validator.mjs`');
});
