// Workspace Trust. Tracing runs the workspace's code (its models, training scripts and launch
// configurations) and the server runs an interpreter the workspace's settings may name, so in
// an untrusted workspace neither happens; snapshots can still be viewed (the tree and the
// report read files, they execute nothing). The manifest declares this "limited" support.
import * as vscode from 'vscode';

export function isTrusted(): boolean {
  return vscode.workspace.isTrusted;
}

/**
 * True when `what` may run. Otherwise says why not, offering to manage trust, and returns
 * false: commands stay visible in Restricted Mode and explain themselves when run.
 */
export function requireTrust(what: string): boolean {
  if (vscode.workspace.isTrusted) return true;
  const manage = 'Manage Workspace Trust';
  void vscode.window
    .showWarningMessage(
      `Memlens: ${what} is disabled in Restricted Mode. Tracing runs this workspace's code (its models, training scripts and launch configurations), so it needs a trusted workspace. Snapshots can still be opened from the Memory view.`,
      manage,
    )
    .then((choice) => {
      if (choice === manage) void vscode.commands.executeCommand('workbench.trust.manage');
    });
  return false;
}

export function onDidGrantTrust(listener: () => void): vscode.Disposable {
  return vscode.workspace.onDidGrantWorkspaceTrust(listener);
}
