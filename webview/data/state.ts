// What the panel remembers across hiding and reloads (VS Code's getState/setState, the page's
// history state in the standalone report): the tab, the filters, the selection. Anything read
// back is untrusted and checked field by field; unknown or stale values fall back to defaults.
import { isCategory } from './categories';
import type { Category } from '../../common/snapshot';
import { TENSOR_COLUMNS, type SortDirection, type TensorColumn } from './tensors';

export const TABS = ['phases', 'timeline', 'modules', 'table', 'details', 'compare'] as const;
export type Tab = (typeof TABS)[number];

export interface ModuleFilter {
  /** What the chip says: a group key or an fqn. */
  label: string;
  /** Module indices in the filter (a module and its descendants). */
  modules: number[];
}

export interface PanelState {
  version: 1;
  /** Identifies the snapshot the rest refers to; filters and selection reset for another one. */
  snapshotKey: string;
  tab: Tab;
  /** Row index in `snapshot.phases` the views are filtered to. */
  phase: number | null;
  table: {
    query: string;
    category: Category | null;
    module: ModuleFilter | null;
    sort: { column: TensorColumn; direction: SortDirection };
    /** Allocation ids of the selected tensors. */
    selected: number[];
  };
  modules: { measure: 'at_peak' | 'category_peaks'; expanded: string[]; merge: boolean };
  /** `streams`: reserved memory per stream drawn as lines (snapshots with several streams). */
  timeline: { range: [number, number] | null; budget: boolean; streams: boolean };
  phasesView: { budget: boolean };
  /** Allocation id of the tensor, or "file:line" of the line, shown in Details. */
  details: { tensor: number | null; line: string | null };
  compare: { merged: boolean };
}

export function defaultState(snapshotKey = ''): PanelState {
  return {
    version: 1,
    snapshotKey,
    tab: 'phases',
    phase: null,
    table: { query: '', category: null, module: null, sort: { column: 'bytes', direction: 'desc' }, selected: [] },
    modules: { measure: 'at_peak', expanded: [], merge: true },
    timeline: { range: null, budget: false, streams: false },
    // The phases at their own scale: a 7.8 GiB peak on an 80 GiB card would be a sliver.
    phasesView: { budget: false },
    details: { tensor: null, line: null },
    compare: { merged: true },
  };
}

/** A saved state made safe to use; parts about another snapshot are dropped. */
export function restoreState(saved: unknown, snapshotKey: string): PanelState {
  const d = defaultState(snapshotKey);
  if (!isRecord(saved) || saved['version'] !== 1) return d;
  const tab = TABS.find((t) => t === saved['tab']) ?? d.tab;
  const sameSnapshot = saved['snapshotKey'] === snapshotKey;
  const compare = isRecord(saved['compare']) ? saved['compare'] : {};
  const modules = isRecord(saved['modules']) ? saved['modules'] : {};
  const phasesView = isRecord(saved['phasesView']) ? saved['phasesView'] : {};
  const timeline = isRecord(saved['timeline']) ? saved['timeline'] : {};
  const out: PanelState = {
    ...d,
    tab,
    modules: {
      measure: modules['measure'] === 'category_peaks' ? 'category_peaks' : 'at_peak',
      expanded: sameSnapshot ? strings(modules['expanded']) : [],
      merge: modules['merge'] !== false,
    },
    phasesView: { budget: phasesView['budget'] === true },
    timeline: { range: null, budget: timeline['budget'] === true, streams: timeline['streams'] === true },
    compare: { merged: compare['merged'] !== false },
  };
  if (!sameSnapshot) return out;
  out.phase = nonNegativeInt(saved['phase']);
  const range = timeline['range'];
  if (Array.isArray(range) && range.length === 2 && range.every((x) => typeof x === 'number' && Number.isFinite(x))) {
    out.timeline.range = [range[0] as number, range[1] as number];
  }
  const table = isRecord(saved['table']) ? saved['table'] : {};
  const sort = isRecord(table['sort']) ? table['sort'] : {};
  const column = TENSOR_COLUMNS.find((c) => c === sort['column']);
  out.table = {
    query: typeof table['query'] === 'string' ? table['query'].slice(0, 500) : '',
    category: isCategory(table['category']) ? table['category'] : null,
    module: moduleFilter(table['module']),
    sort: {
      column: column ?? 'bytes',
      direction: sort['direction'] === 'asc' ? 'asc' : 'desc',
    },
    selected: Array.isArray(table['selected'])
      ? table['selected'].filter((x): x is number => Number.isInteger(x) && (x as number) >= 0)
      : [],
  };
  const details = isRecord(saved['details']) ? saved['details'] : {};
  out.details = {
    tensor: nonNegativeInt(details['tensor']),
    line: typeof details['line'] === 'string' ? details['line'] : null,
  };
  return out;
}

function moduleFilter(v: unknown): ModuleFilter | null {
  if (!isRecord(v) || typeof v['label'] !== 'string' || !Array.isArray(v['modules'])) return null;
  const modules = v['modules'].filter((x): x is number => Number.isInteger(x) && (x as number) >= -1);
  return { label: v['label'], modules };
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function nonNegativeInt(v: unknown): number | null {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A key that tells snapshots apart (when it was made, what, where), for saved state. */
export function snapshotKeyOf(s: { meta: { created: string; target?: { name: string }; rank: number }; summary: { peak_bytes: number; allocation_count: number } }): string {
  return [s.meta.created, s.meta.target?.name ?? '', s.meta.rank, s.summary.peak_bytes, s.summary.allocation_count].join('|');
}
