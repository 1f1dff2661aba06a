import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { fitPointOf, isFitRunFile } from '../../src/snapshotFile';

test("a fit run folder's own records are not listed as snapshots (nor as unreadable ones)", () => {
  const run = '/ws/.memlens/fit/train-1e25a0398e';
  assert.equal(isFitRunFile(`${run}/fit.json`), true);
  assert.equal(isFitRunFile(`${run}/points/gpus=1-fc238be0/job.json`), true);
  assert.equal(isFitRunFile(`${run}/points/gpus=1-fc238be0/result.json`), true);
  assert.equal(isFitRunFile('C:\\ws\\.memlens\\fit\\train-1\\fit.json'), true);
});

test("a fit point's snapshot and every trace's snapshot are still read", () => {
  assert.equal(isFitRunFile('/ws/.memlens/fit/train-1e25a0398e/points/gpus=1-fc238be0/snapshot.json'), false);
  assert.equal(isFitRunFile('/ws/.memlens/script-train.py-64549f96/20261202-022731-614256.json'), false);
  // a target folder whose name merely starts with "fit"
  assert.equal(isFitRunFile('/ws/.memlens/fit-model-ab12/20261202-022731-614256.json'), false);
});

test("a fit point's snapshot is labelled by its axes and values", () => {
  const run = '/ws/.memlens/fit/train-1e25a0398e/points';
  assert.equal(fitPointOf(`${run}/gpus=1-fc238be0/snapshot.json`), 'gpus=1');
  assert.equal(fitPointOf(`${run}/gpus=8_micro-batch=16-0a1b2c3d/snapshot.json`), 'gpus=8, micro-batch=16');
  assert.equal(fitPointOf('/ws/.memlens/script-train.py-64549f96/20261202-022731-614256.json'), undefined);
});
