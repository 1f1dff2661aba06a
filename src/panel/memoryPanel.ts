// The memory panel in VS Code: a webview showing one snapshot (and optionally a second to
// compare). The snapshot goes to the webview by message, never by file URL; the webview asks
// back by message to open a source line or pick a snapshot to compare with. One panel per
// snapshot file; panels come back after a window reload (WebviewPanelSerializer).
import * as path from 'node:path';
import * as vscode from 'vscode';
import { isWebviewMessage, type HostMessage, type SavedWebviewState, type WebviewMessage } from '../../common/messages';
import { loadPanelPage } from './page';
import { fileTitle, panelTitle } from './title';
import { oneLine } from '../../common/oneLine';
import { sourceCandidates } from '../sourcePath';

export const VIEW_TYPE = 'memlens.memoryPanel';

export class MemoryPanel implements vscode.Disposable {
  private static readonly open = new Map<string, MemoryPanel>();
  private readonly disposables: vscode.Disposable[] = [];
  private compareUri: vscode.Uri | undefined;

  /** Shows the panel of `snapshot` (creating it if needed), optionally comparing with another. */
  static show(context: vscode.ExtensionContext, snapshot: vscode.Uri, compare?: vscode.Uri, log?: vscode.LogOutputChannel): MemoryPanel {
    const existing = MemoryPanel.open.get(snapshot.toString());
    if (existing) {
      if (compare) existing.setCompare(compare);
      existing.panel.reveal();
      return existing;
    }
    const panel = vscode.window.createWebviewPanel(VIEW_TYPE, fileTitle(snapshot.fsPath), vscode.ViewColumn.Beside, options(context));
    return new MemoryPanel(context, panel, snapshot, compare, log);
  }

  /** A panel VS Code restores after a reload, from the state the webview saved. */
  static revive(context: vscode.ExtensionContext, panel: vscode.WebviewPanel, state: unknown, log?: vscode.LogOutputChannel): void {
    const saved = state as Partial<SavedWebviewState> | undefined;
    const source = typeof saved?.source === 'string' ? saved.source : undefined;
    if (!source) {
      panel.dispose();
      return;
    }
    panel.webview.options = options(context);
    const compare = typeof saved?.compareSource === 'string' ? vscode.Uri.file(saved.compareSource) : undefined;
    new MemoryPanel(context, panel, vscode.Uri.file(source), compare, log);
  }

  private constructor(
    context: vscode.ExtensionContext,
    readonly panel: vscode.WebviewPanel,
    readonly snapshot: vscode.Uri,
    compare: vscode.Uri | undefined,
    private readonly log?: vscode.LogOutputChannel,
  ) {
    this.compareUri = compare;
    MemoryPanel.open.set(snapshot.toString(), this);
    const dist = vscode.Uri.joinPath(context.extensionUri, 'dist');
    const webview = panel.webview;
    loadPanelPage(webview, dist, fileTitle(snapshot.fsPath));
    this.disposables.push(
      webview.onDidReceiveMessage((m: unknown) => void this.receive(m)),
      panel.onDidDispose(() => this.dispose()),
    );
  }

  private async receive(message: unknown): Promise<void> {
    if (!isWebviewMessage(message)) return;
    try {
      await this.handle(message);
    } catch (e) {
      this.log?.error(`memory panel: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  private async handle(message: WebviewMessage): Promise<void> {
    switch (message.type) {
      case 'ready':
        return this.send();
      case 'openFile':
        return this.openFile(message.file, message.line);
      case 'pickCompare': {
        const picked = await vscode.window.showOpenDialog({
          canSelectMany: false,
          filters: { 'memlens snapshot': ['json'] },
          defaultUri: vscode.Uri.file(path.dirname(this.snapshot.fsPath)),
          openLabel: 'Compare',
        });
        if (picked?.[0]) await this.setCompare(picked[0]);
        return;
      }
      case 'log':
        if (message.level === 'error') this.log?.error(`memory panel: ${message.message}`);
        else this.log?.info(`memory panel: ${message.message}`);
        return;
    }
  }

  private async setCompare(uri: vscode.Uri): Promise<void> {
    this.compareUri = uri;
    const doc = await readJson(uri);
    await this.post(doc.ok ? { type: 'compare', snapshot: doc.value, source: uri.fsPath } : { type: 'compare', snapshot: null, source: `${uri.fsPath}: ${doc.error}` });
  }

  /** Reads the snapshot (and the second one) and sends them; the webview validates both. */
  private async send(): Promise<void> {
    const doc = await readJson(this.snapshot);
    if (!doc.ok) return void (await this.post({ type: 'error', message: `${this.snapshot.fsPath}: ${doc.error}` }));
    // The file's name until now: the snapshot itself says what was traced.
    this.panel.title = panelTitle(doc.value, this.snapshot.fsPath);
    const message: HostMessage = { type: 'snapshot', snapshot: doc.value, source: this.snapshot.fsPath };
    if (this.compareUri) {
      const other = await readJson(this.compareUri);
      if (other.ok) {
        message.compare = other.value;
        message.compareSource = this.compareUri.fsPath;
      }
    }
    await this.post(message);
  }

  private async post(message: HostMessage): Promise<void> {
    await this.panel.webview.postMessage(message);
  }

  /** Opens a source position from the snapshot (untrusted: only opens, never runs, anything;
   *  only files inside the workspace folders, see sourcePath.ts). */
  private async openFile(file: string, line: number): Promise<void> {
    const { uri, refused } = await resolveSource(file, this.snapshot);
    if (refused) {
      void vscode.window.showWarningMessage(`Torch Memory Lens: ${refused}.`);
      return;
    }
    if (!uri) {
      void vscode.window.showWarningMessage(`Torch Memory Lens: ${oneLine(file, 300)} is not on this machine.`);
      return;
    }
    const position = new vscode.Position(Math.max(0, line - 1), 0);
    const column = vscode.window.visibleTextEditors.find((e) => e.viewColumn !== this.panel.viewColumn)?.viewColumn ?? vscode.ViewColumn.One;
    await vscode.window.showTextDocument(uri, {
      viewColumn: column,
      selection: new vscode.Range(position, position),
      preserveFocus: false,
      preview: true,
    });
  }

  dispose(): void {
    MemoryPanel.open.delete(this.snapshot.toString());
    this.panel.dispose();
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}

function options(context: vscode.ExtensionContext): vscode.WebviewPanelOptions & vscode.WebviewOptions {
  return {
    enableScripts: true,
    enableFindWidget: true,
    // State (tab, filters, selection) survives hiding through getState/setState, not by keeping
    // a hidden 100,000-row page alive.
    retainContextWhenHidden: false,
    localResourceRoots: [vscode.Uri.joinPath(context.extensionUri, 'dist')],
  };
}

async function readJson(uri: vscode.Uri): Promise<{ ok: true; value: unknown } | { ok: false; error: string }> {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(await vscode.workspace.fs.readFile(uri));
  } catch (e) {
    return { ok: false, error: e instanceof TypeError ? 'not a snapshot (not UTF-8 text)' : `cannot read it (${e instanceof Error ? e.message : String(e)})` };
  }
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, error: `not valid JSON (${e instanceof Error ? e.message : String(e)})` };
  }
}

/** The first file of sourceCandidates (only inside the workspace folders) that exists. */
async function resolveSource(file: string, snapshot: vscode.Uri): Promise<{ uri?: vscode.Uri; refused?: string }> {
  const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath);
  const decision = sourceCandidates(file, snapshot.fsPath, folders);
  if (!decision.ok) return { refused: decision.message };
  for (const candidate of decision.candidates) {
    const uri = vscode.Uri.file(candidate);
    try {
      const stat = await vscode.workspace.fs.stat(uri);
      if (stat.type & vscode.FileType.File) return { uri };
    } catch {
      // not there: try the next
    }
  }
  return {};
}
