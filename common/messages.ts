// The only channel between the panel and its host (the VS Code extension, src/panel/): typed
// messages. The standalone HTML report has no host; see webview/host.ts.

/** Host → webview. `snapshot` and `compare` are untrusted JSON; the webview validates them. */
export type HostMessage =
  | { type: 'snapshot'; snapshot: unknown; compare?: unknown; source?: string; compareSource?: string }
  | { type: 'compare'; snapshot: unknown; source?: string }
  /** A search's result (memlens.fit's FitReport): the Fit view instead of a snapshot. */
  | { type: 'fit'; fit: unknown }
  | { type: 'error'; message: string };

/** Webview → host. */
export type WebviewMessage =
  /** The webview has loaded (again) and wants its data. */
  | { type: 'ready' }
  /** Open a file at a 1-based line in the editor. */
  | { type: 'openFile'; file: string; line: number }
  /** Let the user pick a second snapshot to compare with. */
  | { type: 'pickCompare' }
  /** Show a snapshot (a point of a search) in a memory panel of its own. */
  | { type: 'openSnapshot'; path: string }
  /** Something went wrong in the webview: for the extension's log. */
  | { type: 'log'; level: 'info' | 'error'; message: string };

/** The state the webview stores with setState (and the host reads back to restore a panel); the
 * host keeps `panel` (the webview's PanelState) without looking inside. */
export interface SavedWebviewState<Panel = unknown> {
  panel: Panel;
  source?: string;
  compareSource?: string;
}

export function isHostMessage(v: unknown): v is HostMessage {
  if (typeof v !== 'object' || v === null) return false;
  const type = (v as { type?: unknown }).type;
  return type === 'snapshot' || type === 'compare' || type === 'fit' || type === 'error';
}

export function isWebviewMessage(v: unknown): v is WebviewMessage {
  if (typeof v !== 'object' || v === null) return false;
  const m = v as Record<string, unknown>;
  switch (m['type']) {
    case 'ready':
    case 'pickCompare':
      return true;
    case 'openFile':
      return typeof m['file'] === 'string' && Number.isInteger(m['line']);
    case 'openSnapshot':
      return typeof m['path'] === 'string';
    case 'log':
      return (m['level'] === 'info' || m['level'] === 'error') && typeof m['message'] === 'string';
    default:
      return false;
  }
}
