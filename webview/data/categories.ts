// The eight categories every byte belongs to, their labels, and per-category sums of numbers
// that are already in the snapshot (grouping, never estimating).
import { CATEGORIES, type Category, type CategoryBytes } from '../../common/snapshot';

export { CATEGORIES, type Category, type CategoryBytes };

export const CATEGORY_LABELS: Readonly<Record<Category, string>> = {
  parameter: 'parameters',
  buffer: 'buffers',
  gradient: 'gradients',
  optimizer_state: 'optimizer state',
  activation: 'activations',
  temporary: 'temporaries',
  input: 'inputs',
  other: 'other',
};

export function emptyCategoryBytes(): CategoryBytes {
  return {
    parameter: 0,
    buffer: 0,
    gradient: 0,
    optimizer_state: 0,
    activation: 0,
    temporary: 0,
    input: 0,
    other: 0,
  };
}

export function isCategory(value: unknown): value is Category {
  return typeof value === 'string' && (CATEGORIES as readonly string[]).includes(value);
}

/** Adds `from` into `into`, category by category; returns `into`. */
export function addCategoryBytes(into: CategoryBytes, from: CategoryBytes): CategoryBytes {
  for (const c of CATEGORIES) into[c] += from[c];
  return into;
}

export function totalOf(bytes: CategoryBytes): number {
  let sum = 0;
  for (const c of CATEGORIES) sum += bytes[c];
  return sum;
}
