import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { toPaint, TRACING_TEXT, type PaintInput } from '../../src/annotationModel';
import type { Annotation } from '../../common/protocol';

const ann = (line: number, share: number, kind: Annotation['kind'] = 'line'): Annotation => ({
  line,
  kind,
  label: `line ${line + 1}`,
  text: `≈ ${line}`,
  bytes: 1,
  share,
  stale: false,
});

const input = (over: Partial<PaintInput>): PaintInput => ({
  annotations: [],
  stale: false,
  tracingLines: [],
  style: 'decorations',
  threshold: 0,
  lineCount: 100,
  ...over,
});

test('annotations are painted by line with their heat colour', () => {
  const out = toPaint(input({ annotations: [ann(5, 0.6), ann(2, 0.01)] }));
  assert.deepEqual(out, [
    { line: 2, text: '≈ 2', color: 'memlens.annotationForeground', italic: false },
    { line: 5, text: '≈ 5', color: 'memlens.annotationHeat3', italic: false },
  ]);
});

test('the threshold hides small lines but never a model class', () => {
  const out = toPaint(input({ annotations: [ann(1, 0.01), ann(2, 0.02, 'class'), ann(3, 0.2)], threshold: 0.05 }));
  assert.deepEqual(out.map((p) => p.line), [2, 3]);
});

test('stale documents look stale; lines past the end are dropped', () => {
  const out = toPaint(input({ annotations: [ann(1, 0.6), ann(200, 0.6)], stale: true }));
  assert.deepEqual(out, [{ line: 1, text: '≈ 1', color: 'memlens.annotationStaleForeground', italic: true }]);
});

test('a trace in progress shows a placeholder over the old annotation', () => {
  const out = toPaint(input({ annotations: [ann(1, 0.6)], tracingLines: [1] }));
  assert.deepEqual(out, [{ line: 1, text: TRACING_TEXT, color: 'memlens.annotationForeground', italic: true }]);
});

test('inlay-hint style paints only placeholders; off paints nothing', () => {
  assert.deepEqual(toPaint(input({ annotations: [ann(1, 0.6)], tracingLines: [3], style: 'inlayHints' })).map((p) => p.text), [TRACING_TEXT]);
  assert.deepEqual(toPaint(input({ annotations: [ann(1, 0.6)], tracingLines: [3], style: 'off' })), []);
});
