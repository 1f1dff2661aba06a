// Generous limits for a loaded 2-core machine. Every wait polls a condition and returns as
// soon as it holds, so large limits cost nothing when things are fast.
// MEMLENS_E2E_TIMEOUT_SCALE=2 doubles them all (slower machines, debugging).
const scale = Number(process.env.MEMLENS_E2E_TIMEOUT_SCALE ?? '1') || 1;

export const timeouts = {
  /** code-server answering /healthz, and --install-extension finishing. */
  server: 120_000 * scale,
  /** First workbench paint after navigation (loads ~10 MB of JS). */
  workbench: 180_000 * scale,
  /** Any single UI condition: a quick-open row, a decoration, a hover, a notification. */
  ui: 60_000 * scale,
  /** A whole test case. */
  test: 600_000 * scale,
};
