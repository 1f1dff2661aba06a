// The phases of the device the summary describes, in order, with their row index in
// `snapshot.phases` (a tensor's `phase` points at that row).
import type { Phase, Snapshot } from '../../common/snapshot';

export interface PhaseRef {
  index: number;
  phase: Phase;
}

/** Phase rows of `meta.device_key`, in phase order. */
export function devicePhases(s: Snapshot): PhaseRef[] {
  const key = s.meta.device_key;
  const out: PhaseRef[] = [];
  s.phases.forEach((phase, index) => {
    if (phase.device === key) out.push({ index, phase });
  });
  return out;
}

/** The phase (of `phases`, sorted by start) containing event `seq`: [start_seq, end_seq). */
export function phaseAtSeq(phases: readonly PhaseRef[], seq: number): PhaseRef | undefined {
  let lo = 0;
  let hi = phases.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const p = phases[mid]!;
    if (seq < p.phase.start_seq) hi = mid - 1;
    else if (seq >= p.phase.end_seq) lo = mid + 1;
    else return p;
  }
  return undefined;
}

/** A phase name as chart axis lines: `forward_backward_iter_1` → [`forward_backward`, `iter 1`],
 * so that neighbouring phases' names do not run into each other on a narrow panel. */
export function phaseAxisLines(name: string): string[] {
  const m = /^(.*)_iter_(\d+)$/.exec(name);
  if (m) return [m[1]!, `iter ${m[2]}`];
  const parts = name.split('_and_');
  return parts.length === 2 ? [`${parts[0]}_and_`, parts[1]!] : [name];
}
