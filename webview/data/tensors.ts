// The table of tensors alive at the peak: filtering, sorting and the running total of a
// selection ("what if I removed these"). Works on row indices so 100,000 rows stay cheap.
import { CATEGORY_LABELS } from './categories';
import { formatShape } from './format';
import { CATEGORIES, type Category, type CategoryBytes, type Snapshot } from '../../common/snapshot';
import { emptyCategoryBytes } from './categories';

export const TENSOR_COLUMNS = ['bytes', 'shape', 'dtype', 'category', 'module', 'phase', 'op'] as const;
export type TensorColumn = (typeof TENSOR_COLUMNS)[number];
export type SortDirection = 'asc' | 'desc';

export interface TensorFilter {
  /** Space-separated words, each must appear (case-insensitive) in the row's text. */
  query: string;
  category: Category | null;
  /** Row index in `snapshot.phases`. */
  phase: number | null;
  /** Module indices to keep (a module and everything inside it), or null for all. */
  modules: ReadonlySet<number> | null;
}

export const NO_FILTER: TensorFilter = { query: '', category: null, phase: null, modules: null };

/** Per-snapshot text of each row, computed once and shared by filtering and sorting. */
export class TensorText {
  private readonly moduleNames: string[];
  private readonly moduleLower: string[];
  private readonly phaseLower: string[];
  private shapes: (string | undefined)[] = [];

  constructor(private readonly s: Snapshot) {
    this.moduleNames = s.modules.map((m) => (m.fqn === '' ? `(${m.class})` : m.fqn));
    this.moduleLower = s.modules.map((m, i) => `${this.moduleNames[i]}\u0000${m.class}`.toLowerCase());
    this.phaseLower = s.phases.map((p) => p.name.toLowerCase());
  }

  module(i: number): string {
    const m = this.s.tensors[i]!.module;
    return m < 0 ? '(no module)' : this.moduleNames[m]!;
  }

  phase(i: number): string {
    return this.s.phases[this.s.tensors[i]!.phase]?.name ?? '';
  }

  shape(i: number): string {
    return (this.shapes[i] ??= formatShape(this.s.tensors[i]!.shape));
  }

  /**
   * A test for rows that contain every (lower-case) word in one of their texts. Module, op,
   * dtype, category and phase are matched once per distinct value, not once per row.
   */
  matcher(words: readonly string[]): (i: number) => boolean {
    const tensors = this.s.tensors;
    const perWord = words.map((w) => {
      const modules = this.moduleLower.map((m) => m.includes(w));
      const phases = this.phaseLower.map((p) => p.includes(w));
      const values = new Map<string, boolean>();
      const value = (v: string) => {
        let hit = values.get(v);
        if (hit === undefined) values.set(v, (hit = v.toLowerCase().includes(w)));
        return hit;
      };
      const categories = new Set(CATEGORIES.filter((c) => CATEGORY_TEXT[c].includes(w)));
      const noModule = '(no module)'.includes(w);
      // A shape prints as digits, brackets, commas and spaces: only such words can match one.
      const shapeWord = SHAPE_WORD.test(w);
      return (i: number) => {
        const t = tensors[i]!;
        return (
          (t.module < 0 ? noModule : modules[t.module]!) ||
          value(t.op) ||
          value(t.dtype) ||
          categories.has(t.category) ||
          (phases[t.phase] ?? false) ||
          (shapeWord && this.shape(i).includes(w))
        );
      };
    });
    return (i) => perWord.every((test) => test(i));
  }
}

const SHAPE_WORD = /^[\d[\], ]+$/;
const CATEGORY_TEXT = Object.fromEntries(CATEGORIES.map((c) => [c, `${CATEGORY_LABELS[c]}\u0000${c}`])) as Record<Category, string>;

/** Indices of the rows that pass the filter, in snapshot order (largest first). */
export function filterTensors(s: Snapshot, text: TensorText, f: TensorFilter): number[] {
  const words = f.query.toLowerCase().split(/\s+/).filter(Boolean);
  const matches = words.length ? text.matcher(words) : null;
  const out: number[] = [];
  const tensors = s.tensors;
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    if (f.category !== null && t.category !== f.category) continue;
    if (f.phase !== null && t.phase !== f.phase) continue;
    if (f.modules !== null && !f.modules.has(t.module)) continue;
    if (matches && !matches(i)) continue;
    out.push(i);
  }
  return out;
}

/**
 * A sorted copy of `rows` (tensor indices in snapshot order, as filterTensors returns them). The
 * sort is stable: ties keep the snapshot's order, largest first. Columns with few distinct
 * values (category, phase, dtype, op, module) sort by buckets in linear time.
 */
export function sortTensors(
  s: Snapshot,
  text: TensorText,
  rows: readonly number[],
  column: TensorColumn,
  direction: SortDirection,
): number[] {
  const t = s.tensors;
  const sign = direction === 'asc' ? 1 : -1;
  if (column === 'bytes' || column === 'shape') {
    const keys = new Float64Array(t.length);
    for (const i of rows) keys[i] = column === 'bytes' ? t[i]!.bytes : t[i]!.shape.reduce((a, d) => a * d, 1);
    return [...rows].sort((a, b) => sign * (keys[a]! - keys[b]!));
  }
  let key: (i: number) => number | string;
  switch (column) {
    case 'category':
      key = (i) => CATEGORIES.indexOf(t[i]!.category);
      break;
    case 'phase':
      key = (i) => t[i]!.phase;
      break;
    case 'dtype':
      key = (i) => t[i]!.dtype;
      break;
    case 'op':
      key = (i) => t[i]!.op;
      break;
    case 'module':
      key = (i) => text.module(i);
      break;
  }
  const buckets = new Map<number | string, number[]>();
  for (const i of rows) {
    const k = key(i);
    const list = buckets.get(k);
    if (list) list.push(i);
    else buckets.set(k, [i]);
  }
  const keys = [...buckets.keys()].sort((a, b) => sign * (a < b ? -1 : a > b ? 1 : 0));
  const out: number[] = [];
  for (const k of keys) for (const i of buckets.get(k)!) out.push(i);
  return out;
}

export interface SelectionTotal {
  count: number;
  bytes: number;
  byCategory: CategoryBytes;
  /** The peak less the selected tensors: what the peak moment would hold without them. */
  peakWithout: number;
}

/** Adds up the bytes of the selected rows (tensor indices). */
export function selectionTotal(s: Snapshot, selected: Iterable<number>): SelectionTotal {
  const byCategory = emptyCategoryBytes();
  let count = 0;
  let bytes = 0;
  for (const i of selected) {
    const t = s.tensors[i];
    if (!t) continue;
    count++;
    bytes += t.bytes;
    byCategory[t.category] += t.bytes;
  }
  return { count, bytes, byCategory, peakWithout: s.summary.peak_bytes - bytes };
}

/** Tensor indices by allocation id (selection survives re-sorting and reloads by id). */
export function indexById(s: Snapshot): Map<number, number> {
  const m = new Map<number, number>();
  s.tensors.forEach((t, i) => m.set(t.id, i));
  return m;
}
