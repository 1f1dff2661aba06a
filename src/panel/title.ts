// The memory panel's tab title: what was traced (meta.target.name), on which rank and device,
// from the snapshot itself; the snapshot folder (`model-GPT-9dba7ffc/…`, a hash of the target)
// names nothing a person knows. No `vscode` import: unit-tested with Node.
import * as path from 'node:path';

/** Longest target name shown: the tab stays readable next to the editor's. */
const MAX_NAME = 48;

/** "Memory: GPT · h100-80gb", "Memory: train · rank 3 of 8 · h100-80gb" (rank when several). */
export function panelTitle(snapshot: unknown, file: string): string {
  const meta = field(snapshot, 'meta');
  const name = oneLine(field(field(meta, 'target'), 'name'), MAX_NAME);
  if (!name) return fileTitle(file);
  const parts = [name];
  const world = field(meta, 'world_size');
  const rank = field(meta, 'rank');
  if (typeof world === 'number' && world > 1 && typeof rank === 'number') parts.push(`rank ${rank} of ${world}`);
  const device = oneLine(field(field(meta, 'device'), 'name'), MAX_NAME);
  if (device) parts.push(device);
  return `Memory: ${parts.join(' · ')}`;
}

/** Until the snapshot is read, or when it names no target: the file under its folder. */
export function fileTitle(file: string): string {
  const dir = path.basename(path.dirname(file));
  return `Memory: ${dir && dir !== '.memlens' ? `${dir}/` : ''}${path.basename(file, '.json')}`;
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

/** A snapshot's string (untrusted) on one bounded line; '' for anything else. */
function oneLine(value: unknown, max: number): string {
  if (typeof value !== 'string') return '';
  const s = value.replace(/\s+/g, ' ').trim();
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
