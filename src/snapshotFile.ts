// Reading a snapshot file for lists (the Snapshots tree, pickers): parse, check it against the
// format's JSON Schema and its own tables (common/validate.ts, shared with the panel), and
// keep what a list shows. A snapshot may come from anyone: a bad file is an error entry with a
// message, never a crash. No `vscode` import.
import { validateTop } from '../common/validate';
import type { SnapshotEntry } from './grouping';

export type SnapshotRead = { ok: true; entry: SnapshotEntry } | { ok: false; path: string; error: string };

/** The entry of the snapshot `text` read from `path` (shown in messages), or why there is none. */
export function readSnapshotEntry(text: string, path: string): SnapshotRead {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    return { ok: false, path, error: `not valid JSON (${e instanceof Error ? e.message : String(e)})` };
  }
  return snapshotEntry(doc, path);
}

/** As readSnapshotEntry, for an already parsed document. */
export function snapshotEntry(doc: unknown, path: string): SnapshotRead {
  // The format, the version, the schema and the document's own table indices, except the items
  // of `tensors` and `allocations` (a list never reads them; the report checks them).
  const checked = validateTop(doc, baseName(path));
  if (!checked.ok) return { ok: false, path, error: checked.error };
  const { meta, summary } = checked.snapshot;
  return {
    ok: true,
    entry: {
      path,
      targetKind: meta.target?.kind ?? 'script',
      targetName: meta.target?.name ?? '',
      targetPath: meta.target?.path ?? '',
      created: meta.created,
      peakBytes: summary.peak_bytes,
      peakPhase: summary.peak_phase,
      device: meta.device.name,
      deviceDisplayName: meta.device.display_name ?? meta.device.name,
      deviceTotalBytes: meta.device.total_memory_bytes,
      worldSize: meta.world_size,
      rank: meta.rank,
    },
  };
}

function baseName(p: string): string {
  return p.split(/[\\/]/).pop() ?? p;
}

/** Snapshot files are `.memlens/<target>/<timestamp>.json` under a workspace folder. */
export const SNAPSHOT_GLOB = '**/.memlens/**/*.json';

/** A file a `memlens fit` run folder keeps for itself (`.memlens/fit/<search>/fit.json`, a
 * point's `job.json` and `result.json`): not a snapshot, and not an unreadable one either. A
 * point's `snapshot.json` is a snapshot. */
export function isFitRunFile(p: string): boolean {
  return /(^|[\\/])\.memlens[\\/]fit[\\/]/.test(p) && !/[\\/]snapshot\.json$/.test(p);
}

/** The point of a fit search a snapshot was traced for, as its axes and values ("gpus=1,
 * micro-batch=4"), from its folder (`points/<axis=value_…>-<hash>/snapshot.json`); undefined
 * for any other snapshot. */
export function fitPointOf(p: string): string | undefined {
  const m = /[\\/]\.memlens[\\/]fit[\\/][^\\/]+[\\/]points[\\/]([^\\/]+)-[0-9a-f]{8}[\\/]snapshot\.json$/.exec(p);
  return m ? m[1]!.split('_').join(', ') : undefined;
}

/** A snapshot's path (dot files, such as a snapshot still being written, are not). */
export function isSnapshotPath(p: string): boolean {
  return /(^|[\\/])\.memlens[\\/](.+[\\/])?[^.\\/][^\\/]*\.json$/.test(p);
}
