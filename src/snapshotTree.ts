// The "Snapshots" tree of the "Memory" activity-bar container: every snapshot file of the
// workspace (.memlens/**/*.json), grouped by target, newest first, read here (no server needed:
// it works in Restricted Mode too) and refreshed when files change.
import * as path from 'node:path';
import * as vscode from 'vscode';
import { formatBytes, formatDate, formatRank } from '../common/format';
import { groupSnapshots, type SnapshotEntry, type SnapshotGroup } from './grouping';
import { fitRunDir, fitSearches, parseFitIndex, type FitIndex, type FitPoint, type FitSearch } from './fitGroups';
import { fitPointOf, isFitRunFile, readSnapshotEntry, SNAPSHOT_GLOB, type SnapshotRead } from './snapshotFile';

const MAX_FILES = 2000;
const REFRESH_DELAY_MS = 300;

export type Node =
  | { kind: 'group'; group: SnapshotGroup }
  | { kind: 'snapshot'; entry: SnapshotEntry }
  | { kind: 'fit'; search: FitSearch }
  | { kind: 'fitPoint'; point: FitPoint }
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
  private fits: FitSearch[] = [];
  private readonly fitIndexes = new Map<string, { mtime: number; index: FitIndex | undefined }>();
  private invalid: { path: string; error: string }[] = [];
  private readonly disposables: vscode.Disposable[] = [];
  private timer: NodeJS.Timeout | undefined;
  private loading: Promise<void> | undefined;
  /** What the tree last showed: a refresh that reads the same is not drawn again. */
  private shown = '';
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
    // One change reaches the tree several times (its own file watcher, the server's
    // snapshotsChanged, Refresh): redrawing the same rows would replace their items under
    // a click that is expanding one ("No tree item with id … found").
    const shown = JSON.stringify([this.groups, this.fits, this.invalid]);
    if (shown === this.shown) return;
    this.shown = shown;
    this.changed.fire(undefined);
  }

  private async load(): Promise<void> {
    const uris = await vscode.workspace.findFiles(SNAPSHOT_GLOB, '**/node_modules/**', MAX_FILES);
    const seen = new Set<string>();
    const reads: SnapshotRead[] = [];
    for (const uri of uris) {
      const file = uri.fsPath;
      if (path.basename(file).startsWith('.')) continue; // being written
      if (isFitRunFile(file)) {
        // a fit search's own records, not snapshots; its fit.json says what its points are
        if (path.basename(file) === 'fit.json') await this.readFitIndex(uri, seen);
        continue;
      }
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
    for (const key of [...this.fitIndexes.keys()]) if (!seen.has(key)) this.fitIndexes.delete(key);
    const snapshots = reads.flatMap((r) => (r.ok ? [r.entry] : []));
    // A fit search is one node of its own, not points among its script's snapshots.
    const indexes = new Map<string, FitIndex>();
    for (const [file, { index }] of this.fitIndexes) if (index) indexes.set(fitRunDir(file)!, index);
    this.fits = fitSearches(snapshots.filter((e) => fitPointOf(e.path)), indexes);
    this.groups = groupSnapshots(snapshots.filter((e) => !fitPointOf(e.path)));
    this.invalid = reads.flatMap((r) => (r.ok ? [] : [{ path: r.path, error: r.error }]));
    void vscode.commands.executeCommand('setContext', 'memlens.hasSnapshots', this.groups.length + this.fits.length + this.invalid.length > 0);
  }

  private async readFitIndex(uri: vscode.Uri, seen: Set<string>): Promise<void> {
    const file = uri.fsPath;
    if (fitRunDir(file) === undefined) return;
    seen.add(file);
    try {
      const st = await vscode.workspace.fs.stat(uri);
      if (this.fitIndexes.get(file)?.mtime === st.mtime) return;
      const index = parseFitIndex(new TextDecoder().decode(await vscode.workspace.fs.readFile(uri)));
      this.fitIndexes.set(file, { mtime: st.mtime, index });
    } catch (e) {
      this.log.debug(`fit search ${file}: ${e instanceof Error ? e.message : String(e)}`);
    }
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
    if (node.kind === 'fit') {
      const f = node.search;
      const item = new vscode.TreeItem(f.label, vscode.TreeItemCollapsibleState.Collapsed);
      item.id = `fit:${f.key}`;
      item.description = f.description;
      item.tooltip = `${f.points.length} point${f.points.length === 1 ? '' : 's'} · ${vscode.workspace.asRelativePath(f.key)}`;
      item.iconPath = new vscode.ThemeIcon('search');
      item.contextValue = 'memlens.fitSearch';
      return item;
    }
    if (node.kind === 'fitPoint') return fitPointItem(node.point);
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
        ...this.fits.map((search): Node => ({ kind: 'fit', search })),
        ...this.invalid.map((i): Node => ({ kind: 'invalid', ...i })),
      ];
    }
    if (node.kind === 'group') return node.group.entries.map((entry): Node => ({ kind: 'snapshot', entry }));
    if (node.kind === 'fit') return node.search.points.map((point): Node => ({ kind: 'fitPoint', point }));
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
  if (node.kind === 'fitPoint') return node.point.entry?.path;
  return undefined;
}

const VERDICTS = { fits: 'fits', oom: 'OOM', error: 'error' } as const;

/** A point of a fit search: its axes, then its peak and verdict; the frontier starred. */
function fitPointItem(p: FitPoint): vscode.TreeItem {
  const item = new vscode.TreeItem(p.label, vscode.TreeItemCollapsibleState.None);
  const e = p.entry;
  item.id = `fitPoint:${p.run}:${p.label}`;
  const verdict = p.verdict ? VERDICTS[p.verdict] : 'not traced';
  const how = p.source && p.source !== 'traced' && p.source !== 'resumed' ? ` (${p.source})` : '';
  // The peak first: a narrow sidebar cuts the end of the line, and the star is also the icon.
  item.description = [e ? `${formatBytes(e.peakBytes)} peak` : '', `${verdict}${how}`, p.frontier ? '★ largest that fits' : ''].filter(Boolean).join(' · ');
  item.tooltip = `${p.label}: ${verdict}${how}${p.frontier ? ' — on the frontier: no larger configuration of this search fits' : ''}`;
  item.iconPath = new vscode.ThemeIcon(p.frontier ? 'star-full' : p.verdict === 'fits' ? 'pass' : p.verdict === 'oom' ? 'error' : 'circle-outline');
  if (e) {
    item.contextValue = 'memlens.snapshot';
    item.command = { title: 'Open Memory Report', command: 'memlens.openMemoryReport', arguments: [e.path] };
  }
  return item;
}
