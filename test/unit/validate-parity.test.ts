// One set of rules on both sides: the panel's validator (common/validate.ts) and the CLI's
// (python/memlens/snapshot/io.py) read the same mutated snapshots and agree on each — the same
// place named, the same message for the cross-reference rules (which both sides write by hand).
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import type { Snapshot } from '../../common/snapshot';
import { validateSnapshot } from '../../common/validate';
import { makeSnapshot } from './snapshotFixture';

const root = path.resolve(__dirname, '..', '..', '..');

interface Mutation {
  set: (string | number)[];
  value: unknown;
  where: string;
}
const mutations = (JSON.parse(readFileSync(path.join(root, 'test/fixtures/snapshot-mutations.json'), 'utf8')) as { mutations: Mutation[] }).mutations;

function python(): string {
  if (process.env.MEMLENS_PYTHON) return process.env.MEMLENS_PYTHON;
  const venv = path.join(root, '.venv/bin/python');
  return existsSync(venv) ? venv : 'python3';
}

/** The fixture with an allocation stream of three allocations that points into its tables. */
function withAllocations(): Snapshot {
  const s = makeSnapshot();
  return {
    ...s,
    allocations: {
      devices: ['cuda:0'],
      device: [0, 0, 0],
      bytes: [512, 1024, 2048],
      requested_bytes: [500, 1000, 2000],
      category: [0, 4, 5],
      module: [1, -1, 2],
      op: [0, 1, 2],
      stack: [1, 2, 0],
      stream: [0, 0, 0],
      alloc_seq: [0, 1, 2],
      free_seq: [-1, 3, 4],
      backward: [0, 1, 0],
    },
  };
}

function mutated(m: Mutation): unknown {
  const doc = JSON.parse(JSON.stringify(withAllocations())) as Record<string | number, unknown>;
  let at = doc;
  for (const key of m.set.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
  at[m.set[m.set.length - 1]!] = m.value;
  return doc;
}

/** Python's verdict on each document: null (valid) or its error message. */
function pythonVerdicts(docs: unknown[]): (string | null)[] {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'memlens-parity-'));
  try {
    const files = docs.map((doc, i) => {
      const file = path.join(dir, `m${i}.json`);
      writeFileSync(file, JSON.stringify(doc));
      return file;
    });
    const script = [
      'import json, sys',
      'from memlens.errors import SnapshotError',
      'from memlens.snapshot import read_snapshot',
      'out = []',
      'for f in sys.argv[1:]:',
      '    try:',
      '        read_snapshot(f); out.append(None)',
      '    except SnapshotError as e:',
      '        out.append(str(e.message).replace(f, "snapshot", 1))',
      'print(json.dumps(out))',
    ].join('\n');
    const text = execFileSync(python(), ['-c', script, ...files], {
      encoding: 'utf8',
      env: { ...process.env, PYTHONPATH: path.join(root, 'python') },
    });
    return JSON.parse(text) as (string | null)[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('the base snapshot with an allocation stream is valid on both sides', () => {
  const r = validateSnapshot(withAllocations());
  assert.ok(r.ok, r.ok ? '' : r.error);
  assert.deepEqual(pythonVerdicts([withAllocations()]), [null]);
});

test('each shared mutation is refused by both validators, at the same place', () => {
  const docs = mutations.map(mutated);
  const py = pythonVerdicts(docs);
  mutations.forEach((m, i) => {
    const ts = validateSnapshot(docs[i]);
    const label = JSON.stringify(m.set);
    assert.ok(!ts.ok, `the panel accepts ${label}`);
    assert.ok(py[i] !== null, `Python accepts ${label}`);
    const prefix = `snapshot: invalid snapshot at ${m.where}`;
    assert.ok(ts.error.startsWith(prefix), `panel on ${label}: ${ts.error}`);
    assert.ok(py[i]!.startsWith(prefix), `Python on ${label}: ${py[i]}`);
    // The reference rules are written by hand on both sides: word for word the same.
    if (m.where.includes('index out of range') || m.where.includes('expected')) assert.equal(py[i], ts.error);
  });
});
