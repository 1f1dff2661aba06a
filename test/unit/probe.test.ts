import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { parseProbe, PROBE_SCRIPT, pipInstallArgs, verdict, type Probe } from '../../src/probe';

const ok: Probe = {
  executable: '/v/bin/python',
  pythonVersion: '3.12.1',
  memlens: true,
  memlensVersion: '0.1.0',
  server: true,
  torch: true,
  torchVersion: '2.13.0',
};

test('the verdict names what is missing, worst first', () => {
  assert.equal(verdict(ok, 'py').kind, 'ok');
  assert.equal(verdict({ ...ok, pythonVersion: '3.8.10' }, 'py').kind, 'oldPython');
  assert.equal(verdict({ ...ok, pythonVersion: '3.10.14' }, 'py').kind, 'oldPython'); // tomllib is 3.11's
  assert.equal(verdict({ ...ok, pythonVersion: '3.11.2' }, 'py').kind, 'ok');
  assert.equal(verdict({ ...ok, memlens: false, server: false }, 'py').kind, 'noMemlens');
  assert.equal(verdict({ ...ok, server: false }, 'py').kind, 'noMemlens');
  const noTorch = verdict({ ...ok, torch: false }, '/v/bin/python');
  assert.equal(noTorch.kind, 'noTorch');
  assert.match((noTorch as { message: string }).message, /PyTorch is not installed in \/v\/bin\/python/);
});

test('unexpected interpreter output is an error, not a crash', () => {
  assert.ok(parseProbe('') instanceof Error);
  assert.ok(parseProbe('Python 2 says hi') instanceof Error);
  assert.ok(parseProbe('{"no": "executable"}') instanceof Error);
  const p = parseProbe('some banner\n{"executable": "/p", "pythonVersion": "3.11.0", "memlens": true, "server": true, "torch": false}');
  assert.ok(!(p instanceof Error));
  assert.equal((p as Probe).torch, false);
  assert.equal((p as Probe).memlensVersion, null);
});

test('the probe script runs on a real interpreter and finds this repository’s memlens', () => {
  const root = path.resolve(__dirname, '..', '..', '..');
  const python = process.env.MEMLENS_PYTHON ?? (existsSync(path.join(root, '.venv/bin/python')) ? path.join(root, '.venv/bin/python') : 'python3');
  const out = execFileSync(python, ['-c', PROBE_SCRIPT], {
    encoding: 'utf8',
    env: { ...process.env, PYTHONPATH: path.join(root, 'python') },
  });
  const p = parseProbe(out);
  assert.ok(!(p instanceof Error), String(p));
  assert.equal((p as Probe).memlens, true);
});

test('the install action pip-installs the package shipped in the extension', () => {
  assert.deepEqual(pipInstallArgs('/ext/python'), ['-m', 'pip', 'install', '--disable-pip-version-check', '/ext/python']);
});
