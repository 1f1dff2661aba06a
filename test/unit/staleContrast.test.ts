// Stale annotations stay readable (issue 27 item 4): the contributed stale colour has at least
// WCAG AA contrast (4.5:1) on the editor backgrounds of VS Code's default themes; it was
// disabledForeground, ~1.9:1.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { STALE_COLOR } from '../../src/heat';

const root = path.resolve(__dirname, '..', '..', '..');
const colors = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  contributes: { colors: { id: string; defaults: Record<string, string> }[] };
}).contributes.colors;

function luminance(hex: string): number {
  const [r, g, b] = [1, 3, 5].map((i) => {
    const c = parseInt(hex.slice(i, i + 2), 16) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
}

function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi! + 0.05) / (lo! + 0.05);
}

// editor.background of Dark Modern / Dark+ and Light Modern / Light+.
const BACKGROUNDS = { dark: ['#1f1f1f', '#1e1e1e'], light: ['#ffffff', '#ffffff'] };

test('stale annotations have AA contrast on the default dark and light editors', () => {
  const stale = colors.find((c) => c.id === STALE_COLOR)!;
  for (const kind of ['dark', 'light'] as const) {
    const fg = stale.defaults[kind]!;
    assert.match(fg, /^#[0-9a-f]{6}$/, `${kind}: an opaque colour (a theme's disabled colour is translucent)`);
    for (const bg of BACKGROUNDS[kind]) assert.ok(contrast(fg, bg) >= 4.5, `${kind} ${fg} on ${bg}: ${contrast(fg, bg).toFixed(2)}:1`);
  }
  // High contrast themes: their own text colour.
  assert.equal(stale.defaults['highContrast'], 'editor.foreground');
  assert.equal(stale.defaults['highContrastLight'], 'editor.foreground');
});

test('the contrast function: black on white is 21:1, a colour on itself 1:1', () => {
  assert.equal(contrast('#000000', '#ffffff').toFixed(1), '21.0');
  assert.equal(contrast('#6b6b6b', '#6b6b6b'), 1);
});
