// Numbers and names as people read them in the panel. Bytes use IEC units (common/format.ts, shared
// with the editor annotations); everything here only formats numbers taken from the snapshot.
import { formatBytes } from '../../common/format';

export { formatBytes };

/** A signed change in bytes: "+1.5 GiB", "-512 B", "0 B". */
export function formatDelta(bytes: number): string {
  if (bytes === 0) return '0 B';
  return bytes > 0 ? `+${formatBytes(bytes)}` : formatBytes(bytes);
}

/** `part` as a percentage of `whole`, one decimal: "27.0%"; "–" when the whole is 0. */
export function formatShare(part: number, whole: number): string {
  if (whole === 0 || !Number.isFinite(part / whole)) return '–';
  return `${((100 * part) / whole).toFixed(1)}%`;
}

/** A signed relative change: "+12.5%", "-3.0%", "new" when the base is 0. */
export function formatRelative(before: number, after: number): string {
  if (before === 0) return after === 0 ? '0.0%' : 'new';
  const pct = (100 * (after - before)) / before;
  return `${pct > 0 ? '+' : ''}${pct.toFixed(1)}%`;
}

/** Thousands separated with a thin space-free comma: 100000 → "100,000". */
export function formatCount(n: number): string {
  return Math.trunc(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** A tensor shape as PyTorch prints it: [8, 1024, 768]; a scalar is []. */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

/** The last `keep` parts of a path, for narrow columns: ".../gpt/model.py". */
export function shortPath(file: string, keep = 2): string {
  const parts = file.split(/[\\/]/);
  if (parts.length <= keep) return file;
  return `…/${parts.slice(-keep).join('/')}`;
}

/** "file:line", the form editors and terminals link. */
export function fileLine(file: string, line: number): string {
  return `${file}:${line}`;
}
