// Colours of the panel, as data: which theme variable each category takes (VS Code's chart
// colours, so every theme styles the panel), fallbacks for a page outside VS Code, transparency
// for bands and fills, and the scale that tints a value by its share of the peak.
import type { Category } from '../../common/snapshot';

/** The CSS custom property (defined in webview/style.css) holding a category's colour. */
export function categoryVariable(c: Category): string {
  return `--memlens-${c.replace('_', '-')}`;
}

/** The CSS custom property holding the colour of the `i`-th stream's line (six, then again). */
export function streamVariable(i: number): string {
  return `--memlens-stream-${i % FALLBACK_STREAM_COLORS.length}`;
}

export const FALLBACK_STREAM_COLORS: readonly string[] = ['#cccccc', '#3794ff', '#d18616', '#b180d7', '#89d185', '#cca700'];

/** Used when a theme defines no colour at all (and by the unit tests). */
export const FALLBACK_CATEGORY_COLORS: Readonly<Record<Category, string>> = {
  parameter: '#3794ff',
  buffer: '#4ec9b0',
  gradient: '#d18616',
  optimizer_state: '#b180d7',
  activation: '#89d185',
  temporary: '#f14c4c',
  input: '#cca700',
  other: '#848484',
};

export interface Rgba {
  r: number;
  g: number;
  b: number;
  a: number;
}

/** Parses #rgb, #rgba, #rrggbb, #rrggbbaa, rgb() and rgba() (what getComputedStyle returns). */
export function parseColor(text: string): Rgba | null {
  const s = text.trim().toLowerCase();
  let m = /^#([0-9a-f]{3,8})$/.exec(s);
  if (m) {
    const hex = m[1]!;
    if (hex.length === 3 || hex.length === 4) {
      const [r, g, b, a] = [...hex].map((ch) => parseInt(ch + ch, 16));
      return { r: r!, g: g!, b: b!, a: a === undefined ? 1 : a / 255 };
    }
    if (hex.length === 6 || hex.length === 8) {
      const v = (i: number) => parseInt(hex.slice(i, i + 2), 16);
      return { r: v(0), g: v(2), b: v(4), a: hex.length === 8 ? v(6) / 255 : 1 };
    }
    return null;
  }
  m = /^rgba?\(\s*([\d.]+)[\s,]+([\d.]+)[\s,]+([\d.]+)(?:\s*[,/]\s*([\d.]+%?))?\s*\)$/.exec(s);
  if (m) {
    let a = 1;
    if (m[4] !== undefined) a = m[4].endsWith('%') ? parseFloat(m[4]) / 100 : parseFloat(m[4]);
    return { r: +m[1]!, g: +m[2]!, b: +m[3]!, a };
  }
  return null;
}

export function formatRgba(c: Rgba): string {
  const round = (x: number) => Math.round(Math.min(255, Math.max(0, x)));
  return `rgba(${round(c.r)}, ${round(c.g)}, ${round(c.b)}, ${+Math.min(1, Math.max(0, c.a)).toFixed(3)})`;
}

/** `color` with its alpha multiplied by `alpha`; unparsable colours come back unchanged. */
export function withAlpha(color: string, alpha: number): string {
  const c = parseColor(color);
  return c ? formatRgba({ ...c, a: c.a * alpha }) : color;
}

/** Mixes two colours: t = 0 gives `from`, t = 1 gives `to`. */
export function mix(from: string, to: string, t: number): string {
  const a = parseColor(from);
  const b = parseColor(to);
  if (!a || !b) return t < 0.5 ? from : to;
  const k = Math.min(1, Math.max(0, t));
  return formatRgba({
    r: a.r + (b.r - a.r) * k,
    g: a.g + (b.g - a.g) * k,
    b: a.b + (b.b - a.b) * k,
    a: a.a + (b.a - a.a) * k,
  });
}

/**
 * A tint for a share of the peak (0..1): transparent for nothing, growing to `strong` at 50 %
 * and beyond, on a square-root curve so small but real shares stay visible.
 */
export function shareTint(share: number, strong: string): string {
  const s = Number.isFinite(share) ? Math.min(1, Math.max(0, share * 2)) : 0;
  return withAlpha(strong, Math.sqrt(s) * 0.45);
}
