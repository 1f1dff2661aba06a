// Axis ticks at round binary sizes (0, 2 GiB, 4 GiB, … rather than 0, 4.7 GiB, 9.3 GiB …), so
// the labels that formatBytes prints (one decimal) are short and exact.

const UNITS = [1, 2 ** 10, 2 ** 20, 2 ** 30, 2 ** 40, 2 ** 50];
const STEPS = [1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250, 500];

/** The tick step for an axis from 0 to `max` bytes with about `count` ticks. */
export function byteStep(max: number, count = 6): number {
  if (!(max > 0)) return 1;
  const raw = max / Math.max(1, count);
  for (const unit of UNITS) {
    for (const s of STEPS) {
      if (unit === 1 && s === 2.5) continue; // no half bytes
      if (s * unit >= raw) return s * unit;
    }
  }
  return Math.ceil(raw / UNITS.at(-1)!) * UNITS.at(-1)!;
}

/** Ticks 0, step, 2·step … up to the first at or above `max`. */
export function byteTicks(max: number, count = 6): number[] {
  const step = byteStep(max, count);
  const out: number[] = [];
  for (let v = 0; out.length < 100; v += step) {
    out.push(v);
    if (v >= max) break;
  }
  return out;
}
