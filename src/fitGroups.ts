// Fit searches as the Memory view lists them: one node per search (`.memlens/fit/<search>/`),
// its points as children labelled by their axes, ordered by the axes' values (numbers as
// numbers: 16, 32, 64), the frontier (the largest configurations that fit) marked. Read from
// the search's own index (fit.json: the axes, each point's verdict) and the points' snapshots.
// No `vscode` import.
import type { SnapshotEntry } from './grouping';

export interface FitAxisInfo {
  name: string;
  values: string[];
  direction: string; // "up": a larger value needs more memory; "down": less; "none"
}

export interface FitRowInfo {
  key: string;
  point: Record<string, string>;
  verdict: 'fits' | 'oom' | 'error' | null;
  source: string;
  folder: string;
  peakBytes: number | null;
}

export interface FitIndex {
  target: string;
  device: string;
  created: string;
  axes: FitAxisInfo[];
  rows: FitRowInfo[];
}

export interface FitPoint {
  /** "micro-batch=4, gpus=1" */
  label: string;
  values: Record<string, string>;
  verdict: FitRowInfo['verdict'];
  source: string;
  /** Fits, and no other point that fits needs more memory by every axis' order. */
  frontier: boolean;
  /** The point's snapshot, when it was traced. */
  entry?: SnapshotEntry | undefined;
  /** The search's run folder. */
  run: string;
}

export interface FitSearch {
  /** The run folder. */
  key: string;
  label: string;
  description: string;
  points: FitPoint[];
}

const RUN = /^(.*[\\/]\.memlens[\\/]fit[\\/][^\\/]+)[\\/](?:fit\.json|points[\\/]([^\\/]+-[0-9a-f]{8})[\\/]snapshot\.json)$/;
const RECOMPUTE = ['none', 'selective', 'full'];

/** The run folder of a search's fit.json or of one of its points' snapshots. */
export function fitRunDir(p: string): string | undefined {
  return RUN.exec(p)?.[1];
}

/** A search's fit.json as the tree needs it; undefined when it is not one. */
export function parseFitIndex(text: string): FitIndex | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  const d = doc as Record<string, unknown>;
  if (!d || d.format !== 'memlens.fit' || !Array.isArray(d.space) || !Array.isArray(d.rows)) return undefined;
  const str = (v: unknown): string => (typeof v === 'string' ? v : '');
  return {
    target: str(d.target),
    device: str(d.device),
    created: str(d.created),
    axes: (d.space as Record<string, unknown>[]).map((a) => ({
      name: str(a.name),
      values: Array.isArray(a.values) ? a.values.map(String) : [],
      direction: str(a.direction) || 'none',
    })),
    rows: (d.rows as Record<string, unknown>[]).map((r) => ({
      key: str(r.key),
      point: Object.fromEntries(Object.entries((r.point as Record<string, unknown>) ?? {}).map(([k, v]) => [k, String(v)])),
      verdict: r.verdict === 'fits' || r.verdict === 'oom' || r.verdict === 'error' ? r.verdict : null,
      source: str(r.source),
      folder: str(r.folder),
      peakBytes: typeof r.peak_bytes === 'number' ? r.peak_bytes : null,
    })),
  };
}

/** "gpus=8_micro-batch=16-0a1b2c3d" (a point's folder name) as axis values. */
function valuesOfFolder(name: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of name.replace(/-[0-9a-f]{8}$/, '').split('_')) {
    const eq = part.indexOf('=');
    if (eq > 0) out[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return out;
}

function compareValues(a: string | undefined, b: string | undefined, axis: FitAxisInfo | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return 1;
  if (b === undefined) return -1;
  const na = Number(a);
  const nb = Number(b);
  if (a.trim() !== '' && b.trim() !== '' && Number.isFinite(na) && Number.isFinite(nb)) return na - nb;
  const ia = axis?.values.indexOf(a) ?? -1;
  const ib = axis?.values.indexOf(b) ?? -1;
  if (ia >= 0 && ib >= 0) return ia - ib;
  return a.localeCompare(b);
}

/** A value's place in memory order (larger needs more), as fit/space.py's Axis.rank. */
function rank(axis: FitAxisInfo, value: string): number {
  let position: number;
  if (axis.name === 'recompute' && RECOMPUTE.includes(value)) position = RECOMPUTE.indexOf(value);
  else if (value.trim() !== '' && Number.isFinite(Number(value))) position = Number(value);
  else position = axis.values.indexOf(value);
  return axis.direction === 'up' ? position : -position;
}

/** q needs at least as much memory as p by every axis, and more by one. */
function dominates(q: FitPoint, p: FitPoint, axes: FitAxisInfo[]): boolean {
  let more = false;
  for (const axis of axes) {
    const a = p.values[axis.name] ?? '';
    const b = q.values[axis.name] ?? '';
    if (axis.direction !== 'up' && axis.direction !== 'down') {
      if (a !== b) return false;
      continue;
    }
    const ra = rank(axis, a);
    const rb = rank(axis, b);
    if (rb < ra) return false;
    if (rb > ra) more = true;
  }
  return more;
}

/** The searches of `snapshots` (fit points' snapshots) and `indexes` (run folder → fit.json). */
export function fitSearches(snapshots: readonly SnapshotEntry[], indexes: ReadonlyMap<string, FitIndex>): FitSearch[] {
  const byRun = new Map<string, SnapshotEntry[]>();
  for (const e of snapshots) {
    const run = fitRunDir(e.path);
    if (run === undefined) continue;
    byRun.set(run, [...(byRun.get(run) ?? []), e]);
  }
  for (const run of indexes.keys()) if (!byRun.has(run)) byRun.set(run, []);
  const out: FitSearch[] = [];
  for (const [run, entries] of byRun) {
    const index = indexes.get(run);
    const byFolder = new Map(entries.map((e) => [RUN.exec(e.path)![2]!, e] as const));
    let axes: FitAxisInfo[];
    let points: FitPoint[];
    if (index) {
      axes = index.axes;
      points = index.rows.map((r) => ({
        label: axes.map((a) => `${a.name}=${r.point[a.name] ?? '?'}`).join(', '),
        values: r.point,
        verdict: r.verdict,
        source: r.source,
        frontier: false,
        entry: byFolder.get(r.folder),
        run,
      }));
    } else {
      // Still running (no fit.json yet): the points traced so far, from their folders' names.
      points = [...byFolder].map(([folder, entry]) => {
        const values = valuesOfFolder(folder);
        return { label: Object.entries(values).map(([k, v]) => `${k}=${v}`).join(', '), values, verdict: null, source: 'traced', frontier: false, entry, run };
      });
      axes = Object.keys(points[0]?.values ?? {}).map((name) => ({ name, values: [], direction: 'none' }));
    }
    points.sort((p, q) => {
      for (const axis of axes) {
        const c = compareValues(p.values[axis.name], q.values[axis.name], axis);
        if (c !== 0) return c;
      }
      return 0;
    });
    const fits = points.filter((p) => p.verdict === 'fits');
    for (const p of fits) p.frontier = !fits.some((q) => q !== p && dominates(q, p, axes));
    const name = run.split(/[\\/]/).pop() ?? run;
    const target = index?.target || entries[0]?.targetName || name;
    const largest = points.filter((p) => p.frontier).map((p) => p.label);
    out.push({
      key: run,
      label: `Find What Fits: ${target}`,
      description: [index?.device, `${points.length} point${points.length === 1 ? '' : 's'}`, largest.length ? `fits up to ${largest.join('; ')}` : ''].filter(Boolean).join(' · '),
      points,
    });
  }
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}
