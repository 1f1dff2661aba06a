// One byte format everywhere: the editor's formatBytes (common/format.ts) and the CLI's and
// language server's format_bytes (python/memlens/units.py) write every size alike.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { formatBytes } from '../../common/format';

const root = path.resolve(__dirname, '..', '..', '..');

function python(): string {
  if (process.env.MEMLENS_PYTHON) return process.env.MEMLENS_PYTHON;
  const venv = path.join(root, '.venv/bin/python');
  return existsSync(venv) ? venv : 'python3';
}

const KiB = 1024;
const MiB = KiB ** 2;
const GiB = KiB ** 3;
const SIZES = [
  0, 1, 512, 1023, 1024, 1280 /* 1.25 KiB: a tie, rounded up on both sides */, 1536, 1_024_000 /* 1000.0 KiB */,
  1023.96 * KiB /* 1.0 MiB, not 1024.0 KiB */, MiB - 1, MiB, 1016.1 * MiB, 1023.95 * MiB, 12.35 * MiB, 71.8 * GiB, 70.7 * GiB,
  80 * GiB, 80 * GiB - 1, 140.4 * GiB, 3 * KiB ** 5, -1536, -42 * GiB,
].map(Math.round);

test('common/format.ts and memlens/units.py format every size alike', () => {
  const script = 'import json, sys; from memlens.units import format_bytes; print(json.dumps([format_bytes(n) for n in json.loads(sys.argv[1])]))';
  const out = execFileSync(python(), ['-c', script, JSON.stringify(SIZES)], {
    encoding: 'utf8',
    env: { ...process.env, PYTHONPATH: path.join(root, 'python') },
  });
  const fromPython = JSON.parse(out) as string[];
  assert.deepEqual(fromPython, SIZES.map(formatBytes));
  assert.equal(fromPython[5], '1.3 KiB');
  assert.equal(fromPython[8], '1.0 MiB');
});
