// The table of tensors alive at the peak: filtering, sorting and the running total of a
// selection ("what if I removed these"). Works on row indices so 100,000 rows stay cheap.
import { CATEGORY_LABELS } from './categories';
import { formatShape } from './format';
import { CATEGORIES, type Category, type CategoryBytes, type Snapshot } from './snapshot';
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
  private haystacks: string[] | null = null;
  private readonly moduleNames: string[];

  constructor(private readonly s: Snapshot) {
    this.moduleNames = s.modules.map((m) => m.fqn);
  }

  module(i: number): string {
    const m = this.s.tensors[i]!.module;
    if (m < 0) return '(no module)';
    const name = this.moduleNames[m]!;
    return name === '' ? `(${this.s.modules[m]!.class})` : name;
  }

  phase(i: number): string {
    return this.s.phases[this.s.tensors[i]!.phase]?.name ?? '';
  }

  haystack(i: number): string {
    if (!this.haystacks) {
      this.haystacks = this.s.tensors.map((t, j) => {
        const cls = t.module >= 0 ? this.s.modules[t.module]!.class : '';
        return [this.module(j), cls, t.op, t.dtype, formatShape(t.shape), CATEGORY_LABELS[t.category], t.category, this.phase(j)]
          .join('\u0000')
          .toLowerCase();
      });
    }
    return this.haystacks[i]!;
  }
}

/** Indices of the rows that pass the filter, in snapshot order (largest first). */
export function filterTensors(s: Snapshot, text: TensorText, f: TensorFilter): number[] {
  const words = f.query.toLowerCase().split(/\s+/).filter(Boolean);
  const out: number[] = [];
  const tensors = s.tensors;
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    if (f.category !== null && t.category !== f.category) continue;
    if (f.phase !== null && t.phase !== f.phase) continue;
    if (f.modules !== null && !f.modules.has(t.module)) continue;
    if (words.length) {
      const h = text.haystack(i);
      if (!words.every((w) => h.includes(w))) continue;
    }
    out.push(i);
  }
  return out;
}

/** A sorted copy of `rows`; ties by bytes (largest first), then allocation id. */
export function sortTensors(
  s: Snapshot,
  text: TensorText,
  rows: readonly number[],
  column: TensorColumn,
  direction: SortDirection,
): number[] {
  const t = s.tensors;
  const sign = direction === 'asc' ? 1 : -1;
  const tie = (a: number, b: number) => t[b]!.bytes - t[a]!.bytes || t[a]!.id - t[b]!.id;
  let key: (i: number) => number | string;
  switch (column) {
    case 'bytes':
      key = (i) => t[i]!.bytes;
      break;
    case 'shape':
      key = (i) => t[i]!.shape.reduce((p, d) => p * d, 1);
      break;
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
  const keys = new Map<number, number | string>();
  for (const i of rows) keys.set(i, key(i));
  return [...rows].sort((a, b) => {
    const ka = keys.get(a)!;
    const kb = keys.get(b)!;
    if (ka < kb) return -sign;
    if (ka > kb) return sign;
    return tie(a, b);
  });
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
