// The "Snapshots" tree of the "Memory" activity-bar container: every snapshot file of the
// workspace (.memlens/**/*.json), grouped by target, newest first, read here (no server needed:
// it works in Restricted Mode too) and refreshed when files change.
import * as path from 'node:path';
import * as vscode from 'vscode';
import { formatBytes, formatDate, formatRank } from '../common/format';
import { groupSnapshots, type SnapshotEntry, type SnapshotGroup } from './grouping';
import { fitPointOf, isFitRunFile, readSnapshotEntry, SNAPSHOT_GLOB, type SnapshotRead } from './snapshotFile';

const MAX_FILES = 2000;
const REFRESH_DELAY_MS = 300;

export type Node =
  | { kind: 'group'; group: SnapshotGroup }
  | { kind: 'snapshot'; entry: SnapshotEntry }
  | { kind: 'invalid'; path: string; error: string };

interface Cached {
  mtime: number;
  size: number;
  read: SnapshotRead;
}

const KIND_ICONS: Record<string, string> = {
  model: 'symbol-class',
  script: 'file-code',
  launch: 'debug-alt',
  torchrun: 'terminal',
};

export class SnapshotTree implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private readonly cache = new Map<string, Cached>();
  private groups: SnapshotGroup[] = [];
  private invalid: { path: string; error: string }[] = [];
  private readonly disposables: vscode.Disposable[] = [];
  private timer: NodeJS.Timeout | undefined;
  private loading: Promise<void> | undefined;
  readonly view: vscode.TreeView<Node>;

  constructor(private readonly log: vscode.LogOutputChannel) {
    this.view = vscode.window.createTreeView('memlens.snapshots', { treeDataProvider: this, showCollapseAll: true });
    const watcher = vscode.workspace.createFileSystemWatcher(SNAPSHOT_GLOB);
    this.disposables.push(
      this.view,
      watcher,
      watcher.onDidCreate(() => this.refreshSoon()),
      watcher.onDidChange(() => this.refreshSoon()),
      watcher.onDidDelete(() => this.refreshSoon()),
      vscode.workspace.onDidChangeWorkspaceFolders(() => this.refreshSoon()),
    );
    this.refreshSoon();
  }

  /** Every readable snapshot, newest first within each target. */
  async entries(): Promise<SnapshotEntry[]> {
    await this.loaded();
    return this.groups.flatMap((g) => g.entries);
  }

  async loaded(): Promise<void> {
    if (!this.loading) this.loading = this.load();
    await this.loading;
  }

  /** Re-reads soon; changes in quick succession (a trace writes, renames) make one refresh. */
  refreshSoon(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh();
    }, REFRESH_DELAY_MS);
  }

  async refresh(): Promise<void> {
    this.loading = this.load();
    await this.loading;
    this.changed.fire(undefined);
  }

  private async load(): Promise<void> {
    const uris = await vscode.workspace.findFiles(SNAPSHOT_GLOB, '**/node_modules/**', MAX_FILES);
    const seen = new Set<string>();
    const reads: SnapshotRead[] = [];
    for (const uri of uris) {
      const file = uri.fsPath;
      if (path.basename(file).startsWith('.')) continue; // being written
      if (isFitRunFile(file)) continue; // a fit search's own records, not snapshots
      seen.add(file);
      try {
        const st = await vscode.workspace.fs.stat(uri);
        const hit = this.cache.get(file);
        if (hit && hit.mtime === st.mtime && hit.size === st.size) {
          reads.push(hit.read);
          continue;
        }
        const text = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
        const read = readSnapshotEntry(text, file);
        if (!read.ok) this.log.warn(`snapshot ${file}: ${read.error}`);
        this.cache.set(file, { mtime: st.mtime, size: st.size, read });
        reads.push(read);
      } catch (e) {
        // Deleted between the search and the read: it is simply gone.
        this.log.debug(`snapshot ${file}: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    for (const key of [...this.cache.keys()]) if (!seen.has(key)) this.cache.delete(key);
    this.groups = groupSnapshots(reads.flatMap((r) => (r.ok ? [r.entry] : [])));
    this.invalid = reads.flatMap((r) => (r.ok ? [] : [{ path: r.path, error: r.error }]));
    void vscode.commands.executeCommand('setContext', 'memlens.hasSnapshots', this.groups.length + this.invalid.length > 0);
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === 'group') {
      const g = node.group;
      const item = new vscode.TreeItem(g.label, vscode.TreeItemCollapsibleState.Expanded);
      item.id = `group:${g.key}`;
      item.description = g.description;
      item.iconPath = new vscode.ThemeIcon(KIND_ICONS[g.entries[0]!.targetKind] ?? 'symbol-misc');
      item.contextValue = 'memlens.group';
      item.tooltip = `${g.entries.length} snapshot${g.entries.length === 1 ? '' : 's'} of ${g.label}`;
      return item;
    }
    if (node.kind === 'invalid') {
      const item = new vscode.TreeItem(path.basename(node.path), vscode.TreeItemCollapsibleState.None);
      item.id = `invalid:${node.path}`;
      item.description = 'unreadable';
      item.tooltip = `${node.path}\n\n${node.error}`;
      item.iconPath = new vscode.ThemeIcon('warning');
      item.resourceUri = vscode.Uri.file(node.path);
      item.contextValue = 'memlens.invalidSnapshot';
      return item;
    }
    const e = node.entry;
    // A fit search's point says which configuration it is, not only its peak.
    const point = fitPointOf(e.path);
    const item = new vscode.TreeItem(`${formatBytes(e.peakBytes)} peak${point ? ` · ${point}` : ''}`, vscode.TreeItemCollapsibleState.None);
    item.id = `snapshot:${e.path}`;
    item.description = `${point ? 'fit · ' : ''}${e.device} · ${formatRank(e.rank, e.worldSize)} · ${formatDate(e.created)}`;
    const md = new vscode.MarkdownString();
    md.appendMarkdown(`**${formatBytes(e.peakBytes)}** peak of ${formatBytes(e.deviceTotalBytes)} · `);
    md.appendText(`${e.targetName} (${e.targetKind})\n`);
    md.appendText(`${e.deviceDisplayName} · rank ${e.rank} of ${e.worldSize}${e.peakPhase ? ` · peak in ${e.peakPhase}` : ''}\n`);
    md.appendText(`${formatDate(e.created)} · ${vscode.workspace.asRelativePath(e.path)}`);
    item.tooltip = md;
    item.iconPath = new vscode.ThemeIcon('pulse');
    item.contextValue = 'memlens.snapshot';
    item.command = { title: 'Open Memory Report', command: 'memlens.openMemoryReport', arguments: [e.path] };
    return item;
  }

  async getChildren(node?: Node): Promise<Node[]> {
    if (!node) {
      await this.loaded();
      return [
        ...this.groups.map((group): Node => ({ kind: 'group', group })),
        ...this.invalid.map((i): Node => ({ kind: 'invalid', ...i })),
      ];
    }
    if (node.kind === 'group') return node.group.entries.map((entry): Node => ({ kind: 'snapshot', entry }));
    return [];
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.changed.dispose();
    for (const d of this.disposables) d.dispose();
  }
}

/** The file a tree node stands for (context menu commands get the node). */
export function nodePath(node: Node | undefined): string | undefined {
  if (!node) return undefined;
  if (node.kind === 'snapshot') return node.entry.path;
  if (node.kind === 'invalid') return node.path;
  return undefined;
}
