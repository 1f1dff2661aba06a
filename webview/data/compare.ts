// Two snapshots side by side (batch 8 vs 16, rank 0 vs rank 7): the differences of the numbers
// both already hold — peak, phases, categories and modules — largest absolute change first.
import { CATEGORY_LABELS, totalOf } from './categories';
import { CATEGORIES, type Phase, type Snapshot } from '../../common/snapshot';

export interface Delta {
  key: string;
  label: string;
  /** null: the row exists only in the other snapshot. */
  a: number | null;
  b: number | null;
  /** b − a, a missing side counting as 0. */
  delta: number;
}

export interface PhaseDelta {
  key: string;
  name: string;
  device: string;
  a: Phase | null;
  b: Phase | null;
  peak: Delta;
  before: Delta;
  after: Delta;
}

export interface ModuleDelta extends Delta {
  countA: number;
  countB: number;
}

export interface MetaDifference {
  field: string;
  a: string;
  b: string;
}

export interface Comparison {
  peak: Delta;
  categoriesAtPeak: Delta[];
  categoryPeaks: Delta[];
  phases: PhaseDelta[];
  /** One row per module fqn (bytes at the peak, inclusive). */
  modules: ModuleDelta[];
  /** Repeated layers merged by group key (summed over the instances). */
  groups: ModuleDelta[];
  meta: MetaDifference[];
}

export function delta(key: string, label: string, a: number | null, b: number | null): Delta {
  return { key, label, a, b, delta: (b ?? 0) - (a ?? 0) };
}

/** Largest |change| first; ties by label so the order is stable. */
export function byAbsoluteChange<T extends { delta: number; label: string }>(x: T, y: T): number {
  return Math.abs(y.delta) - Math.abs(x.delta) || (x.label < y.label ? -1 : x.label > y.label ? 1 : 0);
}

export function compareSnapshots(a: Snapshot, b: Snapshot): Comparison {
  const peak = delta('peak', 'peak', a.summary.peak_bytes, b.summary.peak_bytes);
  const categoriesAtPeak = CATEGORIES.map((c) =>
    delta(c, CATEGORY_LABELS[c], a.summary.categories_at_peak[c], b.summary.categories_at_peak[c]),
  ).sort(byAbsoluteChange);
  const categoryPeaks = CATEGORIES.map((c) =>
    delta(c, CATEGORY_LABELS[c], a.summary.category_peaks[c], b.summary.category_peaks[c]),
  ).sort(byAbsoluteChange);
  return {
    peak,
    categoriesAtPeak,
    categoryPeaks,
    phases: comparePhases(a, b),
    modules: compareModules(a, b, (m) => m.fqn),
    groups: compareModules(a, b, (m) => m.group),
    meta: compareMeta(a, b),
  };
}

function comparePhases(a: Snapshot, b: Snapshot): PhaseDelta[] {
  const key = (p: Phase) => `${p.device}\u0000${p.name}`;
  const rows = new Map<string, { a: Phase | null; b: Phase | null; order: number }>();
  a.phases.forEach((p, i) => rows.set(key(p), { a: p, b: null, order: i }));
  b.phases.forEach((p, i) => {
    const row = rows.get(key(p));
    if (row) row.b = p;
    else rows.set(key(p), { a: null, b: p, order: a.phases.length + i });
  });
  return [...rows.entries()]
    .map(([k, r]): PhaseDelta & { order: number } => {
      const p = (r.a ?? r.b)!;
      const label = `${p.name} (${p.device})`;
      return {
        key: k,
        name: p.name,
        device: p.device,
        a: r.a,
        b: r.b,
        peak: delta(k, label, r.a?.peak_bytes ?? null, r.b?.peak_bytes ?? null),
        before: delta(k, label, r.a?.current_before_bytes ?? null, r.b?.current_before_bytes ?? null),
        after: delta(k, label, r.a?.current_after_bytes ?? null, r.b?.current_after_bytes ?? null),
        order: r.order,
      };
    })
    .sort((x, y) => Math.abs(y.peak.delta) - Math.abs(x.peak.delta) || x.order - y.order)
    .map(({ order: _order, ...rest }) => rest);
}

function compareModules(
  a: Snapshot,
  b: Snapshot,
  keyOf: (m: Snapshot['modules'][number]) => string,
): ModuleDelta[] {
  const sums = new Map<string, { a: number | null; b: number | null; countA: number; countB: number }>();
  const add = (s: Snapshot, side: 'a' | 'b') => {
    for (const m of s.modules) {
      const k = keyOf(m);
      let row = sums.get(k);
      if (!row) sums.set(k, (row = { a: null, b: null, countA: 0, countB: 0 }));
      row[side] = (row[side] ?? 0) + totalOf(m.at_peak);
      if (side === 'a') row.countA++;
      else row.countB++;
    }
  };
  add(a, 'a');
  add(b, 'b');
  const modelClass = (s: Snapshot) => s.modules.find((m) => m.fqn === '')?.class ?? 'model';
  return [...sums.entries()]
    .map(([k, r]): ModuleDelta => ({
      ...delta(k, k === '' ? `(${modelClass(a)})` : k, r.a, r.b),
      countA: r.countA,
      countB: r.countB,
    }))
    .sort(byAbsoluteChange);
}

function compareMeta(a: Snapshot, b: Snapshot): MetaDifference[] {
  const fields: [string, (s: Snapshot) => unknown][] = [
    ['target', (s) => s.meta.target?.name],
    ['arguments', (s) => (s.meta.target?.args ?? []).join(' ')],
    ['device', (s) => s.meta.device.name],
    ['device memory', (s) => s.meta.device.total_memory_bytes],
    ['rank', (s) => `${s.meta.rank} of ${s.meta.world_size}`],
    ['parallel', (s) => JSON.stringify(s.meta.parallel ?? {})],
    ['precision', (s) => s.meta.precision ?? 'script'],
    ['iterations', (s) => s.meta.iterations],
    ['torch', (s) => s.meta.torch_version],
    ['memlens', (s) => s.meta.tool_version],
    ['created', (s) => s.meta.created],
  ];
  return fields.flatMap(([field, get]) => {
    const va = String(get(a) ?? '');
    const vb = String(get(b) ?? '');
    return va === vb ? [] : [{ field, a: va, b: vb }];
  });
}
