// Theme colours for the canvases. HTML follows the --vscode-* variables by itself; chart.js
// draws with concrete colours, so they are read from the computed style and read again when the
// theme changes (VS Code swaps the body class and the variables; the standalone report follows
// the system's light/dark preference).
import { CATEGORIES, type Category } from '../common/snapshot';
import { FALLBACK_CATEGORY_COLORS, FALLBACK_STREAM_COLORS, categoryVariable, streamVariable, withAlpha } from './data/colors';

export interface Theme {
  dark: boolean;
  foreground: string;
  muted: string;
  background: string;
  grid: string;
  border: string;
  accent: string;
  budget: string;
  peak: string;
  band: string;
  bandAlt: string;
  bandActive: string;
  fontFamily: string;
  fontSize: number;
  monoFamily: string;
  category: Record<Category, string>;
  /** Line colours of reserved memory per stream, by the stream's place in `timeline.streams`. */
  streams: string[];
}

function read(style: CSSStyleDeclaration, name: string, fallback: string): string {
  return style.getPropertyValue(name).trim() || fallback;
}

export function readTheme(): Theme {
  const style = getComputedStyle(document.body);
  const dark = isDark();
  const foreground = read(style, '--vscode-foreground', dark ? '#cccccc' : '#3b3b3b');
  const category = {} as Record<Category, string>;
  for (const c of CATEGORIES) category[c] = read(style, categoryVariable(c), FALLBACK_CATEGORY_COLORS[c]);
  return {
    dark,
    foreground,
    muted: read(style, '--vscode-descriptionForeground', withAlpha(foreground, 0.7)),
    background: read(style, '--vscode-editor-background', dark ? '#1e1e1e' : '#ffffff'),
    grid: withAlpha(foreground, dark ? 0.12 : 0.14),
    border: read(style, '--vscode-panel-border', withAlpha(foreground, 0.2)),
    accent: read(style, '--vscode-focusBorder', '#007fd4'),
    budget: read(style, '--vscode-charts-red', '#f14c4c'),
    peak: read(style, '--vscode-charts-red', '#f14c4c'),
    band: withAlpha(foreground, 0.035),
    bandAlt: withAlpha(foreground, 0.075),
    bandActive: withAlpha(read(style, '--vscode-focusBorder', '#007fd4'), 0.18),
    fontFamily: read(style, '--vscode-font-family', 'system-ui, sans-serif'),
    fontSize: parseFloat(read(style, '--vscode-font-size', '13px')) || 13,
    monoFamily: read(style, '--vscode-editor-font-family', 'monospace'),
    category,
    streams: FALLBACK_STREAM_COLORS.map((fallback, i) => read(style, streamVariable(i), fallback)),
  };
}

function isDark(): boolean {
  const cls = document.body.classList;
  if (cls.contains('vscode-light') || cls.contains('vscode-high-contrast-light')) return false;
  if (cls.contains('vscode-dark') || cls.contains('vscode-high-contrast')) return true;
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ?? true;
}

/** Calls `onChange` (debounced to a frame) whenever the theme may have changed. */
export function watchTheme(onChange: () => void): () => void {
  let pending = 0;
  const fire = () => {
    if (pending) return;
    pending = requestAnimationFrame(() => {
      pending = 0;
      onChange();
    });
  };
  const observer = new MutationObserver(fire);
  observer.observe(document.body, { attributes: true, attributeFilter: ['class', 'data-vscode-theme-kind'] });
  observer.observe(document.documentElement, { attributes: true, attributeFilter: ['style', 'class'] });
  const media = window.matchMedia?.('(prefers-color-scheme: dark)');
  media?.addEventListener('change', fire);
  return () => {
    observer.disconnect();
    media?.removeEventListener('change', fire);
  };
}
