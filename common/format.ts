// Byte formatting shared by annotations, hovers, the status bar and the panel.
// No `vscode` import: unit-tested with plain Node.

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'] as const;

/**
 * Formats a byte count with IEC (power-of-1024) units and one decimal:
 * 512 → "512 B", 1536 → "1.5 KiB", 80 * 2**30 → "80.0 GiB". Negative counts (deltas) keep
 * their sign. Throws RangeError for NaN and infinities: they mean a bug upstream.
 */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) throw new RangeError(`formatBytes: not a finite number: ${bytes}`);
  const sign = bytes < 0 ? '-' : '';
  const abs = Math.abs(bytes);
  if (abs < 1024) return `${sign}${Math.round(abs)} B`;
  let value = abs / 1024;
  let unit = 0;
  // Compare the rounded value so 1023.96 KiB becomes "1.0 MiB", not "1024.0 KiB".
  while (Number(value.toFixed(1)) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${sign}${value.toFixed(1)} ${UNITS[unit]}`;
}

/**
 * The last peak against the budget, as the status bar shows it: both numbers in one unit when
 * they share it ("71.3 / 80 GiB"), each with its own otherwise ("12.6 MiB / 23.6 GiB"). A
 * whole number drops its ".0". Only formats: both numbers come from the server.
 */
export function formatPeakOfBudget(peak: number, budget: number): string {
  const split = (bytes: number): [string, string] => {
    const text = formatBytes(bytes);
    const space = text.lastIndexOf(' ');
    return [text.slice(0, space).replace(/\.0$/, ''), text.slice(space + 1)];
  };
  const [p, pu] = split(peak);
  const [b, bu] = split(budget);
  return pu === bu ? `${p} / ${b} ${bu}` : `${p} ${pu} / ${b} ${bu}`;
}

/** A time for lists, in the local time zone, to the minute: "2025-11-30 10:41". An unreadable
 * time comes back as it was given. */
export function formatDate(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const two = (n: number): string => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

/** The simulated process of a distributed job: "rank 3/8"; "rank 0/1" for one process. */
export function formatRank(rank: number, worldSize: number): string {
  return `rank ${rank}/${worldSize}`;
}
