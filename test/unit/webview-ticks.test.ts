import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { formatBytes } from '../../common/format';
import { byteStep, byteTicks } from '../../webview/data/ticks';

const GiB = 2 ** 30;
const MiB = 2 ** 20;

test('steps are round multiples of a binary unit', () => {
  assert.equal(byteStep(24.5 * GiB, 6), 5 * GiB);
  assert.equal(byteStep(6.4 * GiB, 6), 2 * GiB);
  assert.equal(byteStep(80 * GiB, 8), 10 * GiB);
  assert.equal(byteStep(300 * MiB, 6), 50 * MiB);
  assert.equal(byteStep(900, 6), 200);
  assert.equal(byteStep(0), 1);
});

test('ticks cover the maximum and print short', () => {
  const ticks = byteTicks(24.5 * GiB, 6);
  assert.deepEqual(ticks.map(formatBytes), ['0 B', '5.0 GiB', '10.0 GiB', '15.0 GiB', '20.0 GiB', '25.0 GiB']);
  const small = byteTicks(1500 * MiB, 6);
  assert.ok(small.at(-1)! >= 1500 * MiB);
  assert.ok(small.length <= 8);
});

test('just under a unit the step is one of the next unit', () => {
  assert.equal(byteStep(4.9 * GiB, 6), GiB);
  assert.deepEqual(byteTicks(4.9 * GiB, 6).map(formatBytes), ['0 B', '1.0 GiB', '2.0 GiB', '3.0 GiB', '4.0 GiB', '5.0 GiB']);
});
