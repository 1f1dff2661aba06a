// The module tree of a snapshot, with repeated structures merged by their `group` key
// (h.0 … h.31 → "h.*" ×32, each instance still reachable), and a flat overview that accounts
// for every byte. Bytes come from the snapshot as they are; this file only sums them along the
// tree (module rows are inclusive: a parent already counts its children).
import { addCategoryBytes, emptyCategoryBytes, totalOf } from './categories';
import { CATEGORIES, moduleCategoryBytes, type CategoryBytes, type ModuleRow, type Snapshot } from '../../common/snapshot';

export interface ModuleTreeNode {
  index: number;
  children: ModuleTreeNode[];
}

/** Which bytes of a module to show. */
export type ModuleMeasure = 'at_peak' | 'category_peaks';

const CONTAINERS = new Set(['ModuleList', 'ModuleDict', 'Sequential']);

/**
 * Parent/child links from the dotted names. "" is the model; a name without dots is a child of
 * the model unless it is another top-level module (named after its class, or `Class#N`).
 */
export function moduleForest(modules: readonly ModuleRow[]): ModuleTreeNode[] {
  const nodes = modules.map((_, index): ModuleTreeNode => ({ index, children: [] }));
  const byName = new Map<string, number>();
  modules.forEach((m, i) => {
    if (!byName.has(m.fqn)) byName.set(m.fqn, i);
  });
  const model = byName.get('');
  const roots: ModuleTreeNode[] = [];
  modules.forEach((m, i) => {
    const node = nodes[i]!;
    if (byName.get(m.fqn) !== i || m.fqn === '') {
      roots.push(node);
      return;
    }
    let parent: number | undefined;
    const parts = m.fqn.split('.');
    for (let n = parts.length - 1; n > 0 && parent === undefined; n--) {
      parent = byName.get(parts.slice(0, n).join('.'));
    }
    if (parent === undefined && model !== undefined && !isOtherTopLevel(m, parts[0]!)) {
      parent = model;
    }
    if (parent === undefined) roots.push(node);
    else nodes[parent]!.children.push(node);
  });
  return roots;
}

function isOtherTopLevel(m: ModuleRow, first: string): boolean {
  // A loss module the script calls is named after its class; one outside every model, Class#N.
  return first.includes('#') || (m.fqn === first && m.fqn === m.class);
}

export type ValueOf = (moduleIndex: number) => CategoryBytes;

/** The bytes of each module for a measure taken from its row. */
export function rowMeasure(modules: readonly ModuleRow[], measure: ModuleMeasure): ValueOf {
  return measure === 'at_peak'
    ? (i) => modules[i]!.at_peak
    : (i) => moduleCategoryBytes(modules[i]!);
}

/**
 * Inclusive bytes per module of the tensors alive at the peak that pass `keep` (e.g. made in one
 * phase): each tensor counts for its module and every module containing it. Tensors with no
 * module are returned apart.
 */
export function tensorMeasure(
  snapshot: Snapshot,
  forest: readonly ModuleTreeNode[],
  keep: (tensorIndex: number) => boolean,
): { valueOf: ValueOf; unattributed: CategoryBytes } {
  const own = snapshot.modules.map(() => emptyCategoryBytes());
  const unattributed = emptyCategoryBytes();
  snapshot.tensors.forEach((t, i) => {
    if (!keep(i)) return;
    if (t.module < 0) unattributed[t.category] += t.bytes;
    else own[t.module]![t.category] += t.bytes;
  });
  const inclusive = own.map(() => emptyCategoryBytes());
  const visit = (node: ModuleTreeNode): CategoryBytes => {
    const sum = addCategoryBytes(inclusive[node.index]!, own[node.index]!);
    for (const child of node.children) addCategoryBytes(sum, visit(child));
    return sum;
  };
  forest.forEach(visit);
  return { valueOf: (i) => inclusive[i]!, unattributed };
}

/** Sum of the tensors alive at the peak that belong to no module. */
export function unattributedAtPeak(snapshot: Snapshot): CategoryBytes {
  const out = emptyCategoryBytes();
  for (const t of snapshot.tensors) if (t.module < 0) out[t.category] += t.bytes;
  return out;
}

export interface GroupNode {
  /** Unique among siblings and stable across renders: the parent's id plus this key. */
  id: string;
  /** The group key shared by the instances ("h.*.attn"); an instance's own fqn for one module. */
  key: string;
  /** What to print: the key relative to the parent ("attn"), the model's class for "". */
  label: string;
  className: string;
  /** Module indices of the instances. */
  members: number[];
  /** Summed over the instances. */
  bytes: CategoryBytes;
  total: number;
  /** Total bytes of the smallest and the largest instance. */
  minInstance: number;
  maxInstance: number;
  children: GroupNode[];
  /** Bytes of the instances not held by any child (a module's own tensors), if any. */
  self: CategoryBytes | null;
  /** A container (ModuleList "h") folded into its merged children ("h.*"). */
  foldedContainer: string | null;
  /** Each instance as its own node (computed on first use). */
  instances(): GroupNode[];
}

export interface GroupTreeOptions {
  /** Merge instances that share a group key (default true). */
  merge?: boolean;
}

/** The module forest with siblings that share a group key merged into one node. */
export function groupTree(
  modules: readonly ModuleRow[],
  forest: readonly ModuleTreeNode[],
  valueOf: ValueOf,
  options: GroupTreeOptions = {},
): GroupNode[] {
  const merge = options.merge ?? true;
  const build = (members: ModuleTreeNode[], parentId: string, parentKey: string | null): GroupNode => {
    const first = modules[members[0]!.index]!;
    const key = members.length > 1 ? first.group : first.fqn;
    const bytes = emptyCategoryBytes();
    let minInstance = Number.POSITIVE_INFINITY;
    let maxInstance = 0;
    let className = first.class;
    for (const m of members) {
      const v = valueOf(m.index);
      addCategoryBytes(bytes, v);
      const t = totalOf(v);
      minInstance = Math.min(minInstance, t);
      maxInstance = Math.max(maxInstance, t);
      if (modules[m.index]!.class !== className) className = '(mixed)';
    }
    const id = `${parentId}/${key}`;
    const node: GroupNode = {
      id,
      key,
      label: labelOf(key, parentKey, first),
      className,
      members: members.map((m) => m.index),
      bytes,
      total: totalOf(bytes),
      minInstance: members.length ? minInstance : 0,
      maxInstance,
      children: [],
      self: null,
      foldedContainer: null,
      instances: () => [],
    };
    const buckets = new Map<string, ModuleTreeNode[]>();
    for (const m of members) {
      for (const c of m.children) {
        const row = modules[c.index]!;
        const bucketKey = merge ? row.group : row.fqn;
        const list = buckets.get(bucketKey);
        if (list) list.push(c);
        else buckets.set(bucketKey, [c]);
      }
    }
    node.children = [...buckets.values()]
      .map((list) => fold(build(list, id, key)))
      .sort(byTotalThenKey);
    if (node.children.length) {
      const self = { ...bytes };
      for (const c of node.children) {
        for (const cat of CATEGORIES) self[cat] -= c.bytes[cat];
      }
      if (CATEGORIES.some((cat) => self[cat] !== 0)) node.self = self;
    }
    let cached: GroupNode[] | null = null;
    node.instances = () => {
      if (members.length < 2) return [];
      cached ??= members.map((m) => build([m], `${id}#`, parentKey));
      return cached;
    };
    return node;
  };
  return forest.map((root) => fold(build([root], '', null))).sort(byTotalThenKey);
}

/** A ModuleList/ModuleDict/Sequential that only holds one merged group shows as that group. */
function fold(node: GroupNode): GroupNode {
  const only = node.children[0];
  if (
    node.members.length === 1 &&
    node.children.length === 1 &&
    only &&
    only.members.length > 1 &&
    only.key === `${node.key}.*` &&
    node.self === null &&
    CONTAINERS.has(node.className)
  ) {
    return { ...only, id: node.id, label: node.label === node.key ? only.key : `${node.label}.*`, foldedContainer: node.key };
  }
  return node;
}

function labelOf(key: string, parentKey: string | null, first: ModuleRow): string {
  if (key === '') return first.class;
  if (parentKey && key.startsWith(`${parentKey}.`)) return key.slice(parentKey.length + 1);
  // A root, a child of the model, or an instance under a merged group: the whole name.
  return key;
}

function byTotalThenKey(a: GroupNode, b: GroupNode): number {
  return b.total - a.total || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
}

export interface OverviewEntry {
  label: string;
  /** 'group': a (merged) module; 'self': a module's own tensors; 'none': tensors of no module;
   *  'rest': the smaller entries merged. */
  kind: 'group' | 'self' | 'none' | 'rest';
  count: number;
  bytes: CategoryBytes;
  total: number;
  /** The group keys inside a 'rest' entry, or the one key of a group. */
  keys: string[];
}

/**
 * A partition of the bytes into the largest groups, for the overview chart: start from the roots,
 * open any single module that holds at least half of everything (the model, a lone backbone)
 * into its children and its own tensors, keep repeated groups merged, and fold what is left
 * past `maxEntries` into one "more" entry. The entries add up to the roots plus `unattributed`.
 */
export function overviewPartition(
  roots: readonly GroupNode[],
  unattributed: CategoryBytes | null,
  maxEntries = 14,
): OverviewEntry[] {
  let open: { node: GroupNode | null; entry: OverviewEntry }[] = roots.map((node) => ({
    node,
    entry: groupEntry(node),
  }));
  const grand = open.reduce((s, e) => s + e.entry.total, 0) + (unattributed ? totalOf(unattributed) : 0);
  for (;;) {
    const i = open.findIndex(
      ({ node, entry }) =>
        node !== null &&
        node.members.length === 1 &&
        node.children.length > 0 &&
        (entry.total * 2 >= grand || node.key === ''),
    );
    if (i < 0) break;
    const node = open[i]!.node!;
    const replacement: { node: GroupNode | null; entry: OverviewEntry }[] = node.children.map((c) => ({
      node: c,
      entry: groupEntry(c),
    }));
    if (node.self) {
      replacement.push({
        node: null,
        entry: {
          label: `${node.label} (own tensors)`,
          kind: 'self',
          count: 1,
          bytes: node.self,
          total: totalOf(node.self),
          keys: [node.key],
        },
      });
    }
    open = [...open.slice(0, i), ...replacement, ...open.slice(i + 1)];
  }
  const entries = open.map((o) => o.entry);
  if (unattributed && totalOf(unattributed) !== 0) {
    entries.push({ label: '(no module)', kind: 'none', count: 1, bytes: unattributed, total: totalOf(unattributed), keys: [] });
  }
  const shown = entries.filter((e) => e.total !== 0).sort((a, b) => b.total - a.total);
  if (shown.length <= maxEntries) return shown;
  const head = shown.slice(0, maxEntries - 1);
  const tail = shown.slice(maxEntries - 1);
  const bytes = emptyCategoryBytes();
  for (const e of tail) addCategoryBytes(bytes, e.bytes);
  head.push({
    label: `${tail.length} more`,
    kind: 'rest',
    count: tail.reduce((s, e) => s + e.count, 0),
    bytes,
    total: totalOf(bytes),
    keys: tail.flatMap((e) => e.keys),
  });
  return head;
}

function groupEntry(node: GroupNode): OverviewEntry {
  const label = node.key === '' ? node.label : node.key;
  return {
    label: node.members.length > 1 ? `${label} ×${node.members.length}` : label,
    kind: 'group',
    count: node.members.length,
    bytes: node.bytes,
    total: node.total,
    keys: [node.key],
  };
}
