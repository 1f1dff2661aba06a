// PLACEHOLDER extension: just enough real behaviour (a command, a notification, an after-line
// decoration with a hover, a status bar item) for the e2e harness to assert against.
// The real extension replaces this file.
import * as vscode from 'vscode';
import { registerMemoryPanel } from './panel/register';

export function activate(context: vscode.ExtensionContext): void {
  const annotation = vscode.window.createTextEditorDecorationType({
    after: { margin: '0 0 0 2em', color: new vscode.ThemeColor('editorCodeLens.foreground') },
  });
  const status = vscode.window.createStatusBarItem('memlens.status', vscode.StatusBarAlignment.Left);
  status.name = 'Torch Memory Lens';

  const hello = vscode.commands.registerCommand('memlens.hello', () => {
    // Not awaited: the promise settles only when the user dismisses the notification.
    void vscode.window.showInformationMessage('Hello from Torch Memory Lens');
    const editor = vscode.window.activeTextEditor;
    if (editor) {
      const firstLine = editor.document.lineAt(0).range;
      editor.setDecorations(annotation, [
        {
          range: firstLine,
          hoverMessage: 'Torch Memory Lens placeholder annotation',
          renderOptions: { after: { contentText: '≈ hello' } },
        },
      ]);
    }
    status.text = '$(pulse) Memlens: hello';
    status.show();
  });

  context.subscriptions.push(annotation, status, hello);
  registerMemoryPanel(context);
}

export function deactivate(): void {}
