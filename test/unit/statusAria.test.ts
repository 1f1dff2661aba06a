import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { GiB, snapshotInfo } from './snapshotInfoFixture';
import { snapshotAriaLabel } from '../../src/statusAria';

const info = snapshotInfo();

test('the status bar speaks plain text: no markdown, no codicon, the headroom every view shows', () => {
  const label = snapshotAriaLabel(info);
  assert.equal(label, 'Memlens: peak 7.8 GiB of 80.0 GiB on h100-80gb, fits, 70.7 GiB headroom. train.py. Activate to open the memory report.');
  assert.doesNotMatch(label, /[*`$]|\(pulse\)/);
});

test('a rank is said only for a job of several; a verdict only when the snapshot has one', () => {
  assert.match(snapshotAriaLabel({ ...info, rank: 3, worldSize: 8 }), /on h100-80gb, rank 3 of 8, fits/);
  assert.match(snapshotAriaLabel({ ...info, fits: false, headroomBytes: -2 * GiB }), /does not fit, over by 2\.0 GiB\./);
  assert.equal(snapshotAriaLabel({ ...info, fits: null, headroomBytes: null }).includes('fit'), false);
});
