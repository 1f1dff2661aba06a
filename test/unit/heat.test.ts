import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { annotationColor, HEAT_COLORS, heatLevel, STALE_COLOR } from '../../src/heat';

test('shares of the peak fall into four heat levels', () => {
  assert.equal(heatLevel(0), 0);
  assert.equal(heatLevel(0.0999), 0);
  assert.equal(heatLevel(0.1), 1);
  assert.equal(heatLevel(0.2499), 1);
  assert.equal(heatLevel(0.25), 2);
  assert.equal(heatLevel(0.5), 3);
  assert.equal(heatLevel(1), 3);
  assert.equal(heatLevel(1.7), 3, 'a share above 1 (a rounding upstream) is still hottest');
});

test('bad shares are the coolest level, not an exception', () => {
  assert.equal(heatLevel(Number.NaN), 0);
  assert.equal(heatLevel(-0.5), 0);
  assert.equal(heatLevel(Number.POSITIVE_INFINITY), 0);
});

test('stale annotations have their own colour whatever their heat', () => {
  assert.equal(annotationColor(0.9, false), 'memlens.annotationHeat3');
  assert.equal(annotationColor(0.01, false), 'memlens.annotationForeground');
  assert.equal(annotationColor(0.9, true), STALE_COLOR);
});

test('every colour of the scale is contributed by the manifest, with defaults for all themes', () => {
  const root = path.resolve(__dirname, '..', '..', '..');
  const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    contributes: { colors: { id: string; description: string; defaults: Record<string, string> }[] };
  };
  const contributed = new Map(manifest.contributes.colors.map((c) => [c.id, c]));
  for (const id of [...HEAT_COLORS, STALE_COLOR]) {
    const c = contributed.get(id);
    assert.ok(c, `${id} is not in contributes.colors`);
    assert.ok(c.description.length > 10, `${id} has no description`);
    assert.deepEqual(Object.keys(c.defaults).sort(), ['dark', 'highContrast', 'highContrastLight', 'light']);
  }
});
