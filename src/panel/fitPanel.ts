// The result of a search (Find What Fits) in the panel's page: the same bundle as the memory
// panel, sent a `fit` message instead of a snapshot (webview/views/fit.ts renders it). One panel
// per target; a new search of the same target replaces its content. A traced point's
// "Snapshot" button opens that snapshot in a memory panel.
import * as vscode from 'vscode';
import { isWebviewMessage } from '../../common/messages';
import type { FitReport } from '../../common/protocol';
import { loadPanelPage } from './page';

export const FIT_VIEW_TYPE = 'memlens.fitPanel';

export class FitPanel implements vscode.Disposable {
  private static readonly open = new Map<string, FitPanel>();
  private readonly disposables: vscode.Disposable[] = [];

  static show(context: vscode.ExtensionContext, targetId: string, report: FitReport, log?: vscode.LogOutputChannel): FitPanel {
    const existing = FitPanel.open.get(targetId);
    if (existing) {
      existing.report = report;
      void existing.send();
      existing.panel.reveal();
      return existing;
    }
    const dist = vscode.Uri.joinPath(context.extensionUri, 'dist');
    const panel = vscode.window.createWebviewPanel(FIT_VIEW_TYPE, title(report), vscode.ViewColumn.Beside, {
      enableScripts: true,
      enableFindWidget: true,
      retainContextWhenHidden: false, // shown again: the page asks for the report again
      localResourceRoots: [dist],
    });
    return new FitPanel(panel, dist, targetId, report, log);
  }

  private constructor(
    readonly panel: vscode.WebviewPanel,
    dist: vscode.Uri,
    private readonly targetId: string,
    private report: FitReport,
    private readonly log?: vscode.LogOutputChannel,
  ) {
    FitPanel.open.set(targetId, this);
    const webview = panel.webview;
    loadPanelPage(webview, dist, title(report));
    this.disposables.push(
      webview.onDidReceiveMessage((m: unknown) => void this.receive(m)),
      panel.onDidDispose(() => this.dispose()),
    );
  }

  private async receive(message: unknown): Promise<void> {
    if (!isWebviewMessage(message)) return;
    if (message.type === 'ready') return this.send();
    if (message.type === 'openSnapshot') {
      await vscode.commands.executeCommand('memlens.openPanel', vscode.Uri.file(message.path));
    } else if (message.type === 'log') {
      this.log?.[message.level === 'error' ? 'error' : 'info'](`fit panel: ${message.message}`);
    }
  }

  private async send(): Promise<void> {
    this.panel.title = title(this.report);
    await this.panel.webview.postMessage({ type: 'fit', fit: this.report });
  }

  dispose(): void {
    FitPanel.open.delete(this.targetId);
    this.panel.dispose();
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}

function title(report: FitReport): string {
  return `What fits: ${report.target}`;
}
