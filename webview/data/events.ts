// What happened at an event of the trace (for the timeline's hover): the allocation made or
// freed there, its op and module, looked up in the snapshot's allocation stream.
import type { Category } from '../../common/snapshot';
import { CATEGORIES, type Snapshot } from '../../common/snapshot';

export interface TraceEvent {
  kind: 'alloc' | 'free';
  allocation: number;
  bytes: number;
  op: string;
  /** The module's fqn, "" for the model itself, null when the allocation has none. */
  module: string | null;
  category: Category | 'unknown';
  stack: number;
}

export interface EventIndex {
  /** The event at `seq`, or the closest allocation before it; null without an allocation stream. */
  at(seq: number): TraceEvent | null;
}

export function eventIndex(s: Snapshot): EventIndex {
  const a = s.allocations;
  if (!a || a.alloc_seq.length === 0) return { at: () => null };
  let frees: Map<number, number> | null = null;
  const describe = (i: number, kind: 'alloc' | 'free'): TraceEvent => {
    const m = a.module[i]!;
    return {
      kind,
      allocation: i,
      bytes: a.bytes[i]!,
      op: s.ops[a.op[i]!] ?? '?',
      module: m >= 0 ? (s.modules[m]?.fqn ?? null) : null,
      category: CATEGORIES[a.category[i]!] ?? 'unknown',
      stack: a.stack[i]!,
    };
  };
  return {
    at(seq: number): TraceEvent | null {
      // Allocations are numbered in the order they were made, so alloc_seq increases.
      let lo = 0;
      let hi = a.alloc_seq.length - 1;
      let found = -1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (a.alloc_seq[mid]! <= seq) {
          found = mid;
          lo = mid + 1;
        } else hi = mid - 1;
      }
      if (found >= 0 && a.alloc_seq[found] === seq) return describe(found, 'alloc');
      if (!frees) {
        frees = new Map();
        a.free_seq.forEach((f, i) => {
          if (f >= 0) frees!.set(f, i);
        });
      }
      const freed = frees.get(seq);
      if (freed !== undefined) return describe(freed, 'free');
      return found >= 0 ? describe(found, 'alloc') : null;
    },
  };
}
