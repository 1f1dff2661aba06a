import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { formatCount, formatDelta, formatRelative, formatShape, formatShare, shortPath } from '../../webview/data/format';

test('deltas carry a sign', () => {
  assert.equal(formatDelta(1536), '+1.5 KiB');
  assert.equal(formatDelta(-1536), '-1.5 KiB');
  assert.equal(formatDelta(0), '0 B');
});

test('shares and relative changes', () => {
  assert.equal(formatShare(1, 4), '25.0%');
  assert.equal(formatShare(1, 0), '–');
  assert.equal(formatRelative(100, 150), '+50.0%');
  assert.equal(formatRelative(100, 97), '-3.0%');
  assert.equal(formatRelative(0, 5), 'new');
  assert.equal(formatRelative(0, 0), '0.0%');
});

test('counts, shapes, paths', () => {
  assert.equal(formatCount(100000), '100,000');
  assert.equal(formatCount(999), '999');
  assert.equal(formatShape([8, 1024, 768]), '[8, 1024, 768]');
  assert.equal(formatShape([]), '[]');
  assert.equal(shortPath('/a/b/gpt/model.py'), '…/gpt/model.py');
  assert.equal(shortPath('model.py'), 'model.py');
});
