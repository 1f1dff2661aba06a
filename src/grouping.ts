// Lists as the UI shows them: snapshots grouped by target (the Snapshots tree), targets grouped
// by kind (the Trace Memory picker), and the target under the cursor. No `vscode` import.
import type { Target, TargetKind } from '../common/protocol';

/** What the tree needs of one snapshot file (see snapshotFile.ts). */
export interface SnapshotEntry {
  path: string;
  targetKind: string;
  targetName: string;
  /** The model file or script, as the snapshot names it; may be relative or empty. */
  targetPath: string;
  created: string;
  peakBytes: number;
  peakPhase: string | null;
  device: string;
  deviceDisplayName: string;
  deviceTotalBytes: number;
  worldSize: number;
  rank: number;
}

export interface SnapshotGroup {
  /** Stable across refreshes: the tree keeps a group's expansion by it. */
  key: string;
  label: string;
  description: string;
  /** Newest first. */
  entries: SnapshotEntry[];
}

/** Snapshots are grouped by target: its kind, name and path together. */
export function targetKey(e: Pick<SnapshotEntry, 'targetKind' | 'targetName' | 'targetPath'>): string {
  return `${e.targetKind}\u0000${e.targetName}\u0000${e.targetPath}`;
}

function newestFirst(a: SnapshotEntry, b: SnapshotEntry): number {
  const ta = Date.parse(a.created);
  const tb = Date.parse(b.created);
  if (ta !== tb && !Number.isNaN(ta) && !Number.isNaN(tb)) return tb - ta;
  return a.path < b.path ? 1 : a.path > b.path ? -1 : 0;
}

/** Groups by target, each newest first; groups by their newest snapshot, newest first. */
export function groupSnapshots(entries: readonly SnapshotEntry[]): SnapshotGroup[] {
  const groups = new Map<string, SnapshotEntry[]>();
  for (const e of entries) {
    const key = targetKey(e);
    const list = groups.get(key);
    if (list) list.push(e);
    else groups.set(key, [e]);
  }
  const out: SnapshotGroup[] = [];
  for (const [key, list] of groups) {
    list.sort(newestFirst);
    const first = list[0]!;
    // Two targets may share a name (GPT in two folders): the path tells them apart.
    const sameName = [...groups.values()].filter((l) => l[0]!.targetName === first.targetName).length > 1;
    out.push({
      key,
      label: first.targetName || '(unnamed target)',
      description: [first.targetKind, sameName ? first.targetPath : ''].filter(Boolean).join(' · '),
      entries: list,
    });
  }
  return out.sort((a, b) => newestFirst(a.entries[0]!, b.entries[0]!));
}

export const TARGET_KIND_LABELS: Readonly<Record<TargetKind, string>> = {
  model: 'Model classes',
  script: 'Training scripts',
  launch: 'Launch configurations',
  torchrun: 'torchrun command lines',
};

const KIND_ORDER: readonly TargetKind[] = ['model', 'script', 'launch', 'torchrun'];

export interface TargetGroup {
  kind: TargetKind;
  label: string;
  targets: Target[];
}

/**
 * Targets by kind in a fixed order (models, scripts, launch configurations, torchrun lines),
 * each sorted by name; targets defined in `preferUri` (the active document) come first in
 * their group. Unknown kinds are dropped: the picker could not describe them.
 */
export function groupTargets(targets: readonly Target[], preferUri?: string): TargetGroup[] {
  return KIND_ORDER.map((kind) => ({
    kind,
    label: TARGET_KIND_LABELS[kind],
    targets: targets
      .filter((t) => t.kind === kind)
      .sort((a, b) => Number(b.uri === preferUri) - Number(a.uri === preferUri) || a.name.localeCompare(b.name) || a.id.localeCompare(b.id)),
  })).filter((g) => g.targets.length > 0);
}

/**
 * The target "under the cursor" in a document: the nearest one defined at or above `line`
 * (a class whose body holds the cursor, a launch configuration being edited); when the cursor
 * is above all of them, the document's only target. Undefined when that is ambiguous or the
 * document defines none: then the user picks.
 */
export function targetAtLine(targets: readonly Target[], uri: string, line: number): Target | undefined {
  const here = targets.filter((t) => t.uri === uri).sort((a, b) => a.range.start.line - b.range.start.line);
  let best: Target | undefined;
  for (const t of here) if (t.range.start.line <= line) best = t;
  if (best) return best;
  return here.length === 1 ? here[0] : undefined;
}
