import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { GiB, snapshotInfo } from './snapshotInfoFixture';
import { traceDoneMessage } from '../../src/traceDone';

const info = snapshotInfo({
  device: 'a100-40gb', deviceTotalBytes: 40 * GiB, budgetBytes: 40 * GiB, headroomBytes: 29.4 * GiB,
});

test('a trace that ends says its peak, its device and the headroom every view shows', () => {
  assert.equal(traceDoneMessage('train.py', info), 'Memlens: train.py traced. Peak 7.8 GiB on a100-40gb — fits, 29.4 GiB headroom.');
});

test('a rank of several, a configuration that does not fit, a snapshot without a verdict', () => {
  assert.equal(
    traceDoneMessage('torchrun', { ...info, rank: 2, worldSize: 8, fits: false, headroomBytes: -1.5 * GiB }),
    'Memlens: torchrun traced. Peak 7.8 GiB on a100-40gb, rank 2 of 8 — does not fit, over by 1.5 GiB.',
  );
  assert.equal(traceDoneMessage('GPT', { ...info, fits: null, headroomBytes: null }), 'Memlens: GPT traced. Peak 7.8 GiB on a100-40gb.');
});
