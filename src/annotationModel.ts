// What the after-line decorations of one document show, decided without `vscode`: the server's
// annotations (memlens/annotations) filtered by the threshold, coloured by heat or as stale,
// and "tracing…" placeholders on the lines of targets being traced. annotations.ts paints it.
import type { AnnotationStyle } from './config';
import { annotationColor, HEAT_COLORS } from './heat';
import type { Annotation } from '../common/protocol';

export interface Painted {
  /** 0-based. */
  line: number;
  text: string;
  /** A contributed theme colour id. */
  color: string;
  italic: boolean;
}

export const TRACING_TEXT = '≈ tracing…';

export interface PaintInput {
  annotations: readonly Annotation[];
  /** The server says the document changed since the trace, or it was edited since the
   * server last said anything. */
  stale: boolean;
  /** Lines of targets being traced in this document. */
  tracingLines: readonly number[];
  style: AnnotationStyle;
  threshold: number;
  lineCount: number;
}

export function toPaint(p: PaintInput): Painted[] {
  if (p.style === 'off') return [];
  const out = new Map<number, Painted>();
  if (p.style === 'decorations') {
    for (const a of p.annotations) {
      if (a.line < 0 || a.line >= p.lineCount) continue;
      if (a.share < p.threshold && a.kind !== 'class') continue;
      const stale = p.stale || a.stale;
      // Stale shows in the colour and the italics only; the hover says "edited since trace".
      out.set(a.line, { line: a.line, text: a.text, color: annotationColor(a.share, stale), italic: stale });
    }
  }
  // Placeholders show in every visible style: an inlay hint cannot say "tracing".
  for (const line of p.tracingLines) {
    if (line < 0 || line >= p.lineCount) continue;
    out.set(line, { line, text: TRACING_TEXT, color: HEAT_COLORS[0], italic: true });
  }
  return [...out.values()].sort((a, b) => a.line - b.line);
}
