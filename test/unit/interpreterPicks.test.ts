// Select Interpreter lists the Python extension's discovered environments (the one in use
// marked), then "Follow the Python extension" and "Browse…".
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { interpreterPicks } from '../../src/interpreterPicks';

const rel = (p: string): string => p.replace('/ws/', '');

test("the Python extension's environments, deduplicated, the current one marked", () => {
  const picks = interpreterPicks(
    [
      { executable: '/ws/.venv/bin/python', name: '.venv', type: 'Venv', version: '3.12.3' },
      { executable: '/usr/bin/python3', name: undefined, type: 'Unknown', version: '3.10.12' },
      { executable: '/ws/.venv/bin/python', name: '.venv', type: 'Venv', version: '3.12.3' }, // again
      { executable: undefined, name: 'empty', type: 'Conda', version: undefined }, // no Python in it
      { executable: '/opt/conda/envs/t/bin/python', name: 't', type: 'Conda', version: undefined },
    ],
    '/usr/bin/python3',
    true,
    rel,
  );
  assert.deepEqual(picks.map((p) => [p.action, p.label, p.description]), [
    ['environment', 'Python 3.12.3 (.venv)', 'Venv'],
    ['environment', '$(check) Python 3.10.12 (Python)', ''],
    ['environment', 'Python (t)', 'Conda'],
    ['pythonExtension', '$(python) Follow the Python extension', 'the interpreter it has selected for this workspace'],
    ['browse', '$(folder) Browse…', 'an interpreter anywhere on this machine'],
  ]);
  assert.deepEqual(picks.flatMap((p) => (p.action === 'environment' ? [[p.detail, p.path]] : [])), [
    ['.venv/bin/python', '/ws/.venv/bin/python'],
    ['/usr/bin/python3', '/usr/bin/python3'],
    ['/opt/conda/envs/t/bin/python', '/opt/conda/envs/t/bin/python'],
  ]);
});

test('without the Python extension: only Browse…', () => {
  assert.deepEqual(interpreterPicks([], undefined, false, rel).map((p) => p.action), ['browse']);
});
