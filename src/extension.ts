// Activation: build the context (which owns everything), register the commands, start the
// server. Errors here are shown to the user: an extension that fails silently looks broken.
import * as vscode from 'vscode';
import { registerCommands } from './commands';
import { Ctx } from './ctx';

let ctx: Ctx | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const started = performance.now();
  try {
    ctx = new Ctx(context);
    registerCommands(ctx);
    context.subscriptions.push({ dispose: () => void ctx?.dispose() });
    ctx.log.info(`Torch Memory Lens ${String(context.extension.packageJSON.version)} activated in ${Math.round(performance.now() - started)} ms`);
    void ctx.start();
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    void vscode.window.showErrorMessage(`Torch Memory Lens failed to activate: ${why}`);
    throw e;
  }
}

export async function deactivate(): Promise<void> {
  await ctx?.dispose();
  ctx = undefined;
}
