// Memlens: Choose Trace: which trace annotates the editors. The server decides what each
// document shows (the newest snapshot covering it, or the one chosen here: server/index.py
// `covering`); this only asks it for the candidates and passes the choice on. No `vscode`
// import in the item builder: unit-tested with plain Node.
import { formatBytes, formatDate } from '../common/format';
import type { DocumentTracesResult } from '../common/protocol';

export interface TraceItem {
  label: string;
  description: string;
  detail?: string;
  /** The snapshot to choose; null: back to the newest covering each file. */
  snapshot: string | null;
  picked: boolean;
}

/** The quick pick's items: "Newest trace" first, then each trace covering the file, newest
 * first, the one shown marked. `relative` writes a path as the workspace sees it. */
export function traceItems(r: DocumentTracesResult, relative: (p: string) => string): TraceItem[] {
  const items: TraceItem[] = [
    {
      label: `${r.chosen === null ? '$(check) ' : ''}Newest trace`,
      description: 'each file shows the newest trace that covers it',
      snapshot: null,
      picked: r.chosen === null,
    },
  ];
  for (const t of r.traces) {
    const shown = t.path === r.shown;
    items.push({
      label: `${shown ? '$(check) ' : ''}${t.targetName} · ${formatBytes(t.peakBytes)} peak`,
      description: `${t.kind} · ${t.device} · ${formatDate(t.created)}${t.worldSize > 1 ? ` · rank ${t.rank} of ${t.worldSize}` : ''}`,
      detail: relative(t.path),
      snapshot: t.path,
      picked: shown,
    });
  }
  return items;
}
