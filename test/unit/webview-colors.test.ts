import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { FALLBACK_STREAM_COLORS, categoryVariable, mix, streamVariable, parseColor, shareTint, withAlpha } from '../../webview/data/colors';

test('parses the colour forms getComputedStyle and themes use', () => {
  assert.deepEqual(parseColor('#fff'), { r: 255, g: 255, b: 255, a: 1 });
  assert.deepEqual(parseColor('#3794ff'), { r: 55, g: 148, b: 255, a: 1 });
  assert.deepEqual(parseColor('#3794ff80'), { r: 55, g: 148, b: 255, a: 128 / 255 });
  assert.deepEqual(parseColor(' rgb(1, 2, 3) '), { r: 1, g: 2, b: 3, a: 1 });
  assert.deepEqual(parseColor('rgba(1, 2, 3, 0.5)'), { r: 1, g: 2, b: 3, a: 0.5 });
  assert.deepEqual(parseColor('rgb(1 2 3 / 50%)'), { r: 1, g: 2, b: 3, a: 0.5 });
  assert.equal(parseColor('red'), null);
  assert.equal(parseColor(''), null);
});

test('alpha and mixing', () => {
  assert.equal(withAlpha('#000000', 0.25), 'rgba(0, 0, 0, 0.25)');
  assert.equal(withAlpha('rgba(10, 20, 30, 0.5)', 0.5), 'rgba(10, 20, 30, 0.25)');
  assert.equal(withAlpha('var(--x)', 0.5), 'var(--x)');
  assert.equal(mix('#000000', '#ffffff', 0.5), 'rgba(128, 128, 128, 1)');
});

test('the share tint grows with the share and saturates at half the peak', () => {
  assert.equal(shareTint(0, '#ff0000'), 'rgba(255, 0, 0, 0)');
  assert.equal(shareTint(0.5, '#ff0000'), shareTint(0.9, '#ff0000'));
  const alpha = (s: string) => Number(/, ([\d.]+)\)$/.exec(s)![1]);
  assert.ok(alpha(shareTint(0.01, '#f00')) < alpha(shareTint(0.1, '#f00')));
  assert.equal(shareTint(Number.NaN, '#f00'), 'rgba(255, 0, 0, 0)');
});

test('category variables', () => {
  assert.equal(categoryVariable('optimizer_state'), '--memlens-optimizer-state');
  // Streams take six colours (webview/style.css defines --memlens-stream-0..5), then again.
  assert.equal(FALLBACK_STREAM_COLORS.length, 6);
  assert.deepEqual([0, 5, 6, 13].map(streamVariable), ['--memlens-stream-0', '--memlens-stream-5', '--memlens-stream-0', '--memlens-stream-1']);
});
