import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { verdictOf } from '../../common/headroom';
import { formatBytes } from '../../common/format';

const GiB = 2 ** 30;

test("every view's verdict is the snapshot's: reserved peak + outside, not the allocated peak", () => {
  // A CUDA snapshot: 80 GiB card, allocated peak 8 GiB, reserved peak 10 GiB, 1.2 GiB outside.
  const summary = { peak_bytes: 8 * GiB, reserved_peak_bytes: 10 * GiB, fits: true, headroom_bytes: 80 * GiB - 10 * GiB - 1.2 * GiB };
  const v = verdictOf(summary)!;
  assert.deepEqual(v, { fits: true, headroomBytes: 80 * GiB - 11.2 * GiB });
  assert.equal(formatBytes(v.headroomBytes), '68.8 GiB'); // not 72.0 GiB (80 - the allocated 8)
});

test('a snapshot that does not fit says by how much the card is short', () => {
  assert.deepEqual(verdictOf({ fits: false, headroom_bytes: -3 * GiB }), { fits: false, headroomBytes: -3 * GiB });
});

test('a snapshot without a verdict has none: no view makes one up', () => {
  assert.equal(verdictOf({}), null);
  assert.equal(verdictOf({ fits: true }), null);
  assert.equal(verdictOf({ fits: null, headroom_bytes: null }), null);
});
