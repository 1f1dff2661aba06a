// The memory report: one WebviewPanel running the panel bundle (webview/, dist/webview.js) under
// a strict CSP. The snapshot is read here and sent by message (webview/messages.ts), never
// as a file URL; the webview validates it. It asks back to open source lines and to pick a
// snapshot to compare with. The panel survives reloads through its saved state.
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { HostMessage, SavedWebviewState, WebviewMessage } from '../webview/messages';
import { isWebviewMessage } from '../webview/messages';
import { makeNonce, panelHtml } from './webviewHtml';

const VIEW_TYPE = 'memlens.report';

export interface Shown {
  path: string;
  comparePath?: string;
}

export class PanelHost implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private shown: Shown | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly log: vscode.LogOutputChannel,
    /** Lets the user choose a second snapshot (the panel's "compare with…"). */
    private readonly pickSnapshot: (title: string, exclude?: string) => Promise<string | undefined>,
  ) {
    this.disposables.push(
      vscode.window.registerWebviewPanelSerializer(VIEW_TYPE, {
        deserializeWebviewPanel: async (panel, state: unknown) => {
          const saved = state as Partial<SavedWebviewState> | undefined;
          const shown = typeof saved?.source === 'string' ? { path: saved.source, ...(saved.compareSource ? { comparePath: saved.compareSource } : {}) } : undefined;
          this.adopt(panel, shown);
        },
      }),
    );
  }

  /** Shows a snapshot (and optionally a second to compare with) in the panel. */
  show(snapshotPath: string, comparePath?: string): void {
    const shown: Shown = comparePath ? { path: snapshotPath, comparePath } : { path: snapshotPath };
    if (this.panel) {
      this.shown = shown;
      this.panel.title = title(shown);
      this.panel.reveal(undefined, false);
      void this.send();
      return;
    }
    const panel = vscode.window.createWebviewPanel(VIEW_TYPE, title(shown), vscode.ViewColumn.Beside, {
      enableScripts: true,
      enableFindWidget: true,
      localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'dist')],
    });
    this.adopt(panel, shown);
  }

  get visible(): boolean {
    return this.panel?.visible ?? false;
  }

  private adopt(panel: vscode.WebviewPanel, shown: Shown | undefined): void {
    this.panel?.dispose();
    this.panel = panel;
    this.shown = shown;
    panel.iconPath = vscode.Uri.joinPath(this.extensionUri, 'media', 'memlens.svg');
    panel.webview.options = { enableScripts: true, localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'dist')] };
    const dist = (file: string): string => panel.webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'dist', file)).toString();
    panel.webview.html = panelHtml({
      cspSource: panel.webview.cspSource,
      nonce: makeNonce(),
      scriptUri: dist('webview.js'),
      styleUri: dist('webview.css'),
      title: 'Memory report',
    });
    const subs = [
      panel.webview.onDidReceiveMessage((m: unknown) => void this.receive(m)),
      panel.onDidDispose(() => {
        for (const s of subs) s.dispose();
        if (this.panel === panel) {
          this.panel = undefined;
          this.shown = undefined;
        }
      }),
    ];
  }

  private async receive(m: unknown): Promise<void> {
    if (!isWebviewMessage(m)) {
      this.log.warn(`report panel: ignored a malformed message`);
      return;
    }
    const message: WebviewMessage = m;
    switch (message.type) {
      case 'ready':
        return this.send();
      case 'openFile':
        return this.openFile(message.file, message.line);
      case 'pickCompare': {
        const picked = await this.pickSnapshot('Compare with…', this.shown?.path);
        if (picked && this.shown) {
          this.shown = { ...this.shown, comparePath: picked };
          if (this.panel) this.panel.title = title(this.shown);
          const compare = await readJson(picked);
          if (compare.ok) await this.post({ type: 'compare', snapshot: compare.value, source: picked });
          else await this.post({ type: 'error', message: compare.error });
        }
        return;
      }
      case 'log':
        if (message.level === 'error') this.log.warn(`report panel: ${message.message}`);
        else this.log.info(`report panel: ${message.message}`);
        return;
    }
  }

  /** Reads the snapshot(s) and sends them; a file that cannot be read is shown as an error. */
  private async send(): Promise<void> {
    const shown = this.shown;
    if (!shown) {
      await this.post({ type: 'error', message: 'This report has no snapshot any more: open one from the Snapshots view.' });
      return;
    }
    const main = await readJson(shown.path);
    if (!main.ok) {
      await this.post({ type: 'error', message: main.error });
      return;
    }
    const name = targetName(main.value);
    if (name && this.panel && this.shown === shown) this.panel.title = title(shown, name);
    const message: HostMessage = { type: 'snapshot', snapshot: main.value, source: shown.path };
    if (shown.comparePath) {
      const other = await readJson(shown.comparePath);
      if (other.ok) {
        message.compare = other.value;
        message.compareSource = shown.comparePath;
      } else {
        this.log.warn(other.error);
      }
    }
    if (this.shown === shown) await this.post(message);
  }

  private async post(message: HostMessage): Promise<void> {
    await this.panel?.webview.postMessage(message);
  }

  /** Opens a source position named by the (untrusted) snapshot, if that file exists. */
  private async openFile(file: string, line: number): Promise<void> {
    const candidates = path.isAbsolute(file)
      ? [file]
      : (vscode.workspace.workspaceFolders ?? []).map((f) => path.join(f.uri.fsPath, file));
    for (const candidate of candidates) {
      try {
        if (!(await fs.stat(candidate)).isFile()) continue;
      } catch {
        continue;
      }
      const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(candidate));
      const l = Math.max(0, Math.min(doc.lineCount - 1, Math.floor(line) - 1));
      const at = new vscode.Range(l, 0, l, 0);
      await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.One, selection: at, preserveFocus: false });
      return;
    }
    void vscode.window.showWarningMessage(`Memlens: ${file} is not in this workspace or no longer exists.`);
  }

  dispose(): void {
    this.panel?.dispose();
    for (const d of this.disposables) d.dispose();
  }
}

/** "Memory: GPT" (the target's name, once the snapshot is read; its folder until then). */
function title(s: Shown, name?: string): string {
  const folder = (p: string): string => path.basename(path.dirname(p)) || path.basename(p);
  const first = name ?? folder(s.path);
  return s.comparePath ? `Memory: ${first} ↔ ${folder(s.comparePath)}` : `Memory: ${first}`;
}

/** meta.target.name of an unvalidated document, if it is a short string (it is only a title). */
function targetName(doc: unknown): string | undefined {
  const name = (doc as { meta?: { target?: { name?: unknown } } } | null)?.meta?.target?.name;
  return typeof name === 'string' && name.length > 0 && name.length <= 80 ? name : undefined;
}

type Read = { ok: true; value: unknown } | { ok: false; error: string };

async function readJson(file: string): Promise<Read> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (e) {
    return { ok: false, error: `Cannot read ${file}: ${e instanceof Error ? e.message : String(e)}` };
  }
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (e) {
    return { ok: false, error: `${path.basename(file)} is not valid JSON: ${e instanceof Error ? e.message : String(e)}` };
  }
}
