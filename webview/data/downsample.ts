// Fewer points to draw a long timeline, never at the cost of the peak: the points are split into
// buckets and each bucket keeps its lowest and its highest point (by total), whole rows, so the
// stacked categories of a kept point still add up and the drawn envelope is the true one.

export interface TimelineColumns {
  seq: number;
  total: number;
}

/** Where "seq" and "total" are among the timeline's columns; null if either is missing. */
export function timelineColumns(columns: readonly string[]): TimelineColumns | null {
  const seq = columns.indexOf('seq');
  const total = columns.indexOf('total');
  return seq < 0 || total < 0 ? null : { seq, total };
}

/**
 * The rows of `points` (sorted by seq) to draw between `from` and `to` (inclusive, in seq), at
 * most about `maxPoints` of them. The neighbours just outside the range are kept so lines reach
 * the edges; the highest row inside the range is always kept.
 */
export function downsample(
  points: readonly (readonly number[])[],
  cols: TimelineColumns,
  maxPoints: number,
  from = Number.NEGATIVE_INFINITY,
  to = Number.POSITIVE_INFINITY,
): number[][] {
  let lo = lowerBound(points, cols.seq, from);
  let hi = lowerBound(points, cols.seq, to);
  if (hi < points.length && points[hi]![cols.seq]! <= to) hi++;
  if (lo > 0) lo--;
  if (hi < points.length) hi++;
  const n = hi - lo;
  if (n <= Math.max(maxPoints, 2)) return points.slice(lo, hi) as number[][];
  const buckets = Math.max(1, Math.floor((maxPoints - 2) / 2));
  const out: number[][] = [points[lo] as number[]];
  const inner = n - 2;
  for (let b = 0; b < buckets; b++) {
    const start = lo + 1 + Math.floor((b * inner) / buckets);
    const end = lo + 1 + Math.floor(((b + 1) * inner) / buckets);
    if (end <= start) continue;
    let iMin = start;
    let iMax = start;
    for (let i = start + 1; i < end; i++) {
      const t = points[i]![cols.total]!;
      if (t < points[iMin]![cols.total]!) iMin = i;
      if (t > points[iMax]![cols.total]!) iMax = i;
    }
    if (iMin === iMax) out.push(points[iMin] as number[]);
    else if (iMin < iMax) out.push(points[iMin] as number[], points[iMax] as number[]);
    else out.push(points[iMax] as number[], points[iMin] as number[]);
  }
  out.push(points[hi - 1] as number[]);
  return out;
}

/** The row with the highest total (the first of equals), or undefined for no rows. */
export function highestRow(
  points: readonly (readonly number[])[],
  cols: TimelineColumns,
): readonly number[] | undefined {
  let best: readonly number[] | undefined;
  for (const p of points) if (!best || p[cols.total]! > best[cols.total]!) best = p;
  return best;
}

/** First index whose seq is >= value. */
function lowerBound(points: readonly (readonly number[])[], col: number, value: number): number {
  let lo = 0;
  let hi = points.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid]![col]! < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
