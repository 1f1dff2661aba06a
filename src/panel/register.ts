// The memory panel's command and its restore-after-reload serializer.
import * as vscode from 'vscode';
import { MemoryPanel, VIEW_TYPE } from './memoryPanel';

export const OPEN_PANEL = 'memlens.openPanel';

export function registerMemoryPanel(context: vscode.ExtensionContext, log?: vscode.LogOutputChannel): void {
  context.subscriptions.push(
    vscode.commands.registerCommand(OPEN_PANEL, async (uri?: vscode.Uri, compare?: vscode.Uri) => {
      const snapshot = uri instanceof vscode.Uri ? uri : await pickSnapshot();
      if (snapshot) MemoryPanel.show(context, snapshot, compare instanceof vscode.Uri ? compare : undefined, log);
    }),
    vscode.window.registerWebviewPanelSerializer(VIEW_TYPE, {
      deserializeWebviewPanel: async (panel, state) => MemoryPanel.revive(context, panel, state, log),
    }),
  );
}

/** The active editor's .json file, else one of the workspace's snapshots, else a file dialog. */
async function pickSnapshot(): Promise<vscode.Uri | undefined> {
  const active = vscode.window.activeTextEditor?.document.uri;
  if (active && active.fsPath.endsWith('.json') && /[\\/]\.memlens[\\/]/.test(active.fsPath)) return active;
  const found = await vscode.workspace.findFiles('**/.memlens/**/*.json', '**/node_modules/**', 200);
  if (found.length) {
    const items = await Promise.all(
      found.map(async (uri) => ({ uri, mtime: (await vscode.workspace.fs.stat(uri)).mtime })),
    );
    items.sort((a, b) => b.mtime - a.mtime);
    const picked = await vscode.window.showQuickPick(
      items.map(({ uri, mtime }) => ({
        label: vscode.workspace.asRelativePath(uri),
        description: new Date(mtime).toLocaleString(),
        uri,
      })),
      { title: 'Open a memory snapshot', placeHolder: 'Snapshots in this workspace, newest first' },
    );
    return picked?.uri;
  }
  const chosen = await vscode.window.showOpenDialog({ canSelectMany: false, filters: { 'memlens snapshot': ['json'] }, openLabel: 'Open' });
  return chosen?.[0];
}
