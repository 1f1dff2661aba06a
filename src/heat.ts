// The heat scale of inline annotations: an annotation's share of the peak picks one of the
// theme colours the extension contributes (package.json "colors"), so every theme can restyle
// them. The share comes from the server; this only buckets it. No `vscode` import.

/** Contributed colour ids, coolest first. */
export const HEAT_COLORS = [
  'memlens.annotationForeground',
  'memlens.annotationHeat1',
  'memlens.annotationHeat2',
  'memlens.annotationHeat3',
] as const;

export const STALE_COLOR = 'memlens.annotationStaleForeground';

export type HeatColor = (typeof HEAT_COLORS)[number];

/** Lower bounds (share of the peak) of heat levels 1, 2 and 3; below the first is level 0. */
export const HEAT_THRESHOLDS = [0.1, 0.25, 0.5] as const;

/** 0 (a small part of the peak) .. 3 (half of the peak or more). Bad input counts as 0. */
export function heatLevel(share: number): 0 | 1 | 2 | 3 {
  if (!Number.isFinite(share)) return 0;
  if (share >= HEAT_THRESHOLDS[2]) return 3;
  if (share >= HEAT_THRESHOLDS[1]) return 2;
  if (share >= HEAT_THRESHOLDS[0]) return 1;
  return 0;
}

/** The colour id an annotation is painted with: stale ones all look alike, whatever their heat. */
export function annotationColor(share: number, stale: boolean): HeatColor | typeof STALE_COLOR {
  return stale ? STALE_COLOR : HEAT_COLORS[heatLevel(share)];
}
