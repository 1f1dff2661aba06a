// Where the panel runs: inside VS Code (data and file opening by message, state by
// getState/setState) or as the standalone HTML report (data embedded in the page, state in the
// page's history entry so it survives a reload, and a frame click copies "file:line").
import type { HostMessage, SavedWebviewState, WebviewMessage } from '../common/messages';
import { isHostMessage } from '../common/messages';
import { oneLine } from '../common/oneLine';
import type { PanelState } from './data/state';

export interface Payload {
  snapshot: unknown;
  /** A search's result (memlens.fit) instead of a snapshot: the Fit view. */
  fit?: unknown;
  /** Parts of the snapshot in blocks of their own (field → element id), parsed after the
   *  first paint: the tensors and the allocation stream of a big snapshot. */
  deferred?: Record<string, string>;
  compare?: unknown;
  source?: string;
  compareSource?: string;
}

export interface Host {
  readonly kind: 'vscode' | 'standalone';
  getState(): SavedWebviewState<PanelState> | undefined;
  setState(state: SavedWebviewState<PanelState>): void;
  /** Opens (VS Code) or copies and shows (standalone) a source position. */
  openFile(file: string, line: number): void;
  /** Shows a snapshot file in a panel of its own (VS Code), or copies its path (standalone). */
  openSnapshot(path: string): void;
  /** Asks the host for a second snapshot; undefined where the panel must read a file itself. */
  pickCompare?: () => void;
  /** Calls back with the data, now or when it arrives (again after every reload). */
  onMessage(handler: (message: HostMessage) => void): void;
  /** Puts the deferred parts into the snapshot the last message carried; an error or null. */
  loadDeferred(snapshot: unknown): string | null;
  log(level: 'info' | 'error', message: string): void;
}

interface VsCodeApi {
  postMessage(message: WebviewMessage): void;
  getState(): unknown;
  setState(state: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

export function createHost(notify: (text: string) => void): Host {
  return typeof acquireVsCodeApi === 'function' ? vscodeHost(acquireVsCodeApi()) : standaloneHost(notify);
}

function vscodeHost(api: VsCodeApi): Host {
  return {
    kind: 'vscode',
    getState: () => api.getState() as SavedWebviewState<PanelState> | undefined,
    setState: (state) => api.setState(state),
    openFile: (file, line) => api.postMessage({ type: 'openFile', file, line }),
    openSnapshot: (path) => api.postMessage({ type: 'openSnapshot', path }),
    pickCompare: () => api.postMessage({ type: 'pickCompare' }),
    onMessage(handler) {
      window.addEventListener('message', (event: MessageEvent) => {
        if (isHostMessage(event.data)) handler(event.data);
      });
      api.postMessage({ type: 'ready' });
    },
    log: (level, message) => api.postMessage({ type: 'log', level, message }),
    loadDeferred: () => null,
  };
}

const STATE_KEY = 'memlens';

function standaloneHost(notify: (text: string) => void): Host {
  let deferred: Record<string, string> = {};
  /** One line, no control characters (a snapshot's file name may hold a pasted command). */
  const copy = (text: string): void => {
    const done = () => notify(`Copied ${text}`);
    const fail = () => notify(text);
    try {
      navigator.clipboard?.writeText(text).then(done, fail) ?? fail();
    } catch {
      fail();
    }
  };
  return {
    kind: 'standalone',
    getState() {
      const state: unknown = history.state;
      if (typeof state === 'object' && state !== null && STATE_KEY in state) {
        return (state as Record<string, unknown>)[STATE_KEY] as SavedWebviewState<PanelState>;
      }
      return undefined;
    },
    setState(state) {
      try {
        history.replaceState({ [STATE_KEY]: state }, '');
      } catch {
        // Some browsers limit history state on file:// pages; the state is a convenience.
      }
    },
    openFile(file, line) {
      copy(oneLine(`${file}:${line}`));
    },
    openSnapshot(path) {
      copy(oneLine(path));
    },
    onMessage(handler) {
      const node = document.getElementById('memlens-data');
      if (!node) {
        handler({ type: 'error', message: 'This page holds no snapshot (no memlens-data block).' });
        return;
      }
      let payload: Payload;
      try {
        performance.mark('memlens:parse-start');
        payload = JSON.parse(node.textContent ?? '') as Payload;
        performance.mark('memlens:parsed');
      } catch (e) {
        handler({ type: 'error', message: `The embedded snapshot is not valid JSON: ${e instanceof Error ? e.message : String(e)}` });
        return;
      }
      if (payload?.fit !== undefined) return handler({ type: 'fit', fit: payload.fit });
      if (payload && typeof payload.deferred === 'object' && payload.deferred !== null) deferred = payload.deferred;
      const message: HostMessage = { type: 'snapshot', snapshot: payload?.snapshot };
      if (payload?.compare !== undefined && payload.compare !== null) message.compare = payload.compare;
      if (typeof payload?.source === 'string') message.source = payload.source;
      if (typeof payload?.compareSource === 'string') message.compareSource = payload.compareSource;
      handler(message);
    },
    log(level, message) {
      (level === 'error' ? console.error : console.info)(`[memlens] ${message}`);
    },
    loadDeferred(snapshot) {
      if (typeof snapshot !== 'object' || snapshot === null) return null;
      for (const [field, id] of Object.entries(deferred)) {
        if (field !== 'tensors' && field !== 'allocations') continue;
        const node = document.getElementById(id);
        if (!node) return `The report is incomplete: its ${field} block is missing.`;
        try {
          (snapshot as Record<string, unknown>)[field] = JSON.parse(node.textContent ?? '');
        } catch (e) {
          return `The embedded ${field} are not valid JSON: ${e instanceof Error ? e.message : String(e)}`;
        }
      }
      deferred = {};
      return null;
    },
  };
}
