// Which file a click on a frame of a snapshot may open. The snapshot may come from someone
// else, so its file names are untrusted: only files inside the workspace folders are opened —
// never `/etc/passwd`, never `../../` out of the snapshot's folder. Free of vscode (unit-tested).
import * as path from 'node:path';
import { oneLine } from '../common/oneLine';

export type SourceDecision =
  | { ok: true; candidates: string[] }
  | { ok: false; message: string };

/**
 * The paths to try, in order, for `file` named by the snapshot at `snapshotPath`: an absolute
 * path as it is, a relative one against the snapshot's folder and then each workspace folder —
 * keeping only those inside a workspace folder; or the message that says why none is opened.
 */
export function sourceCandidates(file: string, snapshotPath: string, workspaceFolders: readonly string[]): SourceDecision {
  const shown = oneLine(file, 300);
  if (file !== oneLine(file, Infinity) || file === '') {
    return { ok: false, message: `the snapshot names a file with control characters (${shown}); not opened` };
  }
  const all = path.isAbsolute(file)
    ? [path.resolve(file)]
    : [path.resolve(path.dirname(snapshotPath), file), ...workspaceFolders.map((f) => path.resolve(f, file))];
  const inside = [...new Set(all)].filter((p) => workspaceFolders.some((f) => isInside(p, f)));
  if (inside.length === 0) {
    const where = workspaceFolders.length ? 'outside the workspace folders' : 'not in a workspace folder (none is open)';
    return { ok: false, message: `${shown} is ${where}; not opened` };
  }
  return { ok: true, candidates: inside };
}

/** Whether `p` lies below `folder` (a file in it, or in a folder under it). */
export function isInside(p: string, folder: string): boolean {
  const rel = path.relative(path.resolve(folder), path.resolve(p));
  return rel !== '' && rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel);
}
