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
