// The status bar item: the last peak against its budget ("$(pulse) 71.3 / 80 GiB", "· rank 3" of several),
// in the warning colours above the budget, opening the report on click; otherwise what the
// server is doing (starting, tracing, stopped) or why nothing is traced (Restricted Mode).
import * as vscode from 'vscode';
import { formatBytes, formatDate, formatPeakOfBudget } from '../common/format';
import type { SnapshotInfo } from '../common/protocol';
import { verdictOf } from '../common/headroom';
import { snapshotAriaLabel } from './statusAria';

export type ServerState =
  | { kind: 'starting' }
  | { kind: 'running' }
  | { kind: 'stopped'; why: string }
  | { kind: 'untrusted' };

export class MemoryStatus implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('memlens.status', vscode.StatusBarAlignment.Left, 10);
  private server: ServerState = { kind: 'starting' };
  private snapshot: SnapshotInfo | undefined;
  private chosen = false;
  private tracing: string | undefined;

  constructor() {
    this.item.name = 'Torch Memory Lens';
    this.render();
    this.item.show();
  }

  setServer(state: ServerState): void {
    this.server = state;
    this.render();
  }

  /** The trace the active editor shows (`chosen`: with Memlens: Choose Trace). */
  setSnapshot(info: SnapshotInfo, chosen = false): void {
    this.snapshot = info;
    this.chosen = chosen;
    this.render();
  }

  get current(): SnapshotInfo | undefined {
    return this.snapshot;
  }

  setTracing(name: string | undefined): void {
    this.tracing = name;
    this.render();
  }

  private render(): void {
    const item = this.item;
    item.backgroundColor = undefined;
    item.color = undefined;
    item.accessibilityInformation = undefined; // the plain text and tooltip of the other states
    if (this.server.kind === 'untrusted') {
      item.text = '$(shield) Memlens';
      item.tooltip = 'Torch Memory Lens is in Restricted Mode: snapshots can be opened, but nothing is traced until you trust this workspace.';
      item.command = 'workbench.trust.manage';
      return;
    }
    if (this.server.kind === 'stopped') {
      item.text = '$(warning) Memlens';
      item.tooltip = `The memlens language server is not running: ${this.server.why}\n\nClick to show the log.`;
      item.command = 'memlens.showLog';
      item.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
      return;
    }
    if (this.tracing) {
      item.text = `$(loading~spin) Tracing ${this.tracing}…`;
      item.tooltip = 'A trace is running: its progress is in the notification.';
      item.command = undefined;
      return;
    }
    if (this.snapshot) return this.renderSnapshot(this.snapshot);
    if (this.server.kind === 'starting') {
      item.text = '$(loading~spin) Memlens';
      item.tooltip = 'Starting the memlens language server…';
      item.command = 'memlens.showLog';
      return;
    }
    item.text = '$(pulse) Memlens';
    item.tooltip = 'No trace yet. Click to trace the target under the cursor (Memlens: Trace Memory).';
    item.command = 'memlens.traceMemory';
  }

  private renderSnapshot(s: SnapshotInfo): void {
    const over = s.peakBytes > s.budgetBytes;
    // A rank only where there are several: "· rank 0" on a single-process job says nothing.
    const rank = s.worldSize > 1 ? ` · rank ${s.rank}` : '';
    // Named where the eye goes: which trace the editor's numbers come from.
    this.item.text = `$(pulse) ${shortName(s.targetName)} · ${formatPeakOfBudget(s.peakBytes, s.budgetBytes)}${rank}`;
    const md = new vscode.MarkdownString(undefined, true);
    md.appendMarkdown(`**Peak ${formatBytes(s.peakBytes)}** of a budget of ${formatBytes(s.budgetBytes)}`);
    md.appendMarkdown(over ? ` — **over by ${formatBytes(s.peakBytes - s.budgetBytes)}**\n\n` : '\n\n');
    const verdict = verdictOf({ fits: s.fits, headroom_bytes: s.headroomBytes });
    if (verdict) {
      md.appendText(verdict.fits
        ? `Fits on ${s.device}: ${formatBytes(verdict.headroomBytes)} headroom (reserved peak + outside the allocator)\n\n`
        : `Does not fit on ${s.device}: over by ${formatBytes(-verdict.headroomBytes)}\n\n`);
    }
    md.appendText(`${s.targetName} (${s.kind}) on ${s.device}` + (s.worldSize > 1 ? `, rank ${s.rank} of ${s.worldSize}` : ''));
    if (s.peakPhase) md.appendText(`, peak in ${s.peakPhase}`);
    md.appendText(`\ntraced ${formatDate(s.created)}\n\n`);
    md.appendText(this.chosen ? 'The trace chosen with Memlens: Choose Trace.\n\n' : 'The newest trace of this file (Memlens: Choose Trace shows another).\n\n');
    md.appendMarkdown('Click to open the memory report.');
    this.item.tooltip = md;
    this.item.command = { title: 'Open Memory Report', command: 'memlens.openMemoryReport', arguments: [s.path] };
    this.item.accessibilityInformation = { label: snapshotAriaLabel(s), role: 'button' };
    if (over) {
      this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
      this.item.color = new vscode.ThemeColor('statusBarItem.warningForeground');
    }
  }

  dispose(): void {
    this.item.dispose();
  }
}

/** A target's name as the status bar shows it: at most 24 characters. */
export function shortName(name: string): string {
  return name.length <= 24 ? name : `${name.slice(0, 23)}…`;
}
