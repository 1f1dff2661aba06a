import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { formatBytes, formatDate, formatPeakOfBudget, formatRank } from '../../common/format';

test('bytes below 1 KiB are whole bytes', () => {
  assert.equal(formatBytes(0), '0 B');
  assert.equal(formatBytes(1), '1 B');
  assert.equal(formatBytes(1023), '1023 B');
});

test('IEC units with one decimal', () => {
  assert.equal(formatBytes(1024), '1.0 KiB');
  assert.equal(formatBytes(1536), '1.5 KiB');
  assert.equal(formatBytes(5 * 2 ** 20 + 1), '5.0 MiB');
  assert.equal(formatBytes(80 * 2 ** 30), '80.0 GiB');
  assert.equal(formatBytes(71.3 * 2 ** 30), '71.3 GiB');
  assert.equal(formatBytes(3 * 2 ** 40), '3.0 TiB');
});

test('rounding never shows 1024.0 of a unit', () => {
  assert.equal(formatBytes(2 ** 20 - 1), '1.0 MiB');
  assert.equal(formatBytes(2 ** 30 - 1), '1.0 GiB');
});

test('negative deltas keep their sign', () => {
  assert.equal(formatBytes(-1536), '-1.5 KiB');
  assert.equal(formatBytes(-12), '-12 B');
});

test('the largest unit absorbs huge values', () => {
  assert.equal(formatBytes(2 ** 60), '1024.0 PiB');
});

test('non-finite input is a bug and throws', () => {
  assert.throws(() => formatBytes(Number.NaN), RangeError);
  assert.throws(() => formatBytes(Number.POSITIVE_INFINITY), RangeError);
});

test('peak against budget shares the unit when it can', () => {
  assert.equal(formatPeakOfBudget(71.3 * 2 ** 30, 80 * 2 ** 30), '71.3 / 80 GiB');
  assert.equal(formatPeakOfBudget(71 * 2 ** 30, 80 * 2 ** 30), '71 / 80 GiB');
  assert.equal(formatPeakOfBudget(12.6 * 2 ** 20, 23.6 * 2 ** 30), '12.6 MiB / 23.6 GiB');
  assert.equal(formatPeakOfBudget(90.5 * 2 ** 30, 80 * 2 ** 30), '90.5 / 80 GiB');
  assert.equal(formatPeakOfBudget(512, 1000), '512 / 1000 B');
});

test('dates are local, to the minute; rubbish passes through', () => {
  assert.equal(formatDate(new Date(2025, 10, 30, 9, 5, 59).toISOString()), '2025-11-30 09:05');
  assert.equal(formatDate('not a date'), 'not a date');
  assert.equal(formatRank(3, 8), 'rank 3/8');
});
