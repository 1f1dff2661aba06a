// Reading and writing the `memlens` settings through VS Code (the typed model is config.ts).
import * as vscode from 'vscode';
import { KEYS, RESTART_KEYS, readConfig, type Config } from './config';
import { SETTINGS_SECTION } from '../common/protocol';

export function currentConfig(): Config {
  const section = vscode.workspace.getConfiguration(SETTINGS_SECTION);
  return readConfig((key) => section.get(key));
}

export interface ConfigChange {
  config: Config;
  /** A setting that decides how the server starts changed. */
  restart: boolean;
}

export function onDidChangeConfig(listener: (change: ConfigChange) => void): vscode.Disposable {
  return vscode.workspace.onDidChangeConfiguration((e) => {
    if (!e.affectsConfiguration(SETTINGS_SECTION)) return;
    const restart = RESTART_KEYS.some((k) => e.affectsConfiguration(`${SETTINGS_SECTION}.${k}`));
    listener({ config: currentConfig(), restart });
  });
}

/** Writes a setting where the user most likely wants it: the workspace when one is open (a
 * device or an interpreter belongs to a project), else the user settings. */
export async function updateSetting(field: keyof typeof KEYS, value: unknown): Promise<void> {
  const section = vscode.workspace.getConfiguration(SETTINGS_SECTION);
  const target = vscode.workspace.workspaceFolders?.length
    ? vscode.ConfigurationTarget.Workspace
    : vscode.ConfigurationTarget.Global;
  await section.update(KEYS[field], value, target);
}

export function openSettings(field?: keyof typeof KEYS): Thenable<unknown> {
  return vscode.commands.executeCommand(
    'workbench.action.openSettings',
    field ? `${SETTINGS_SECTION}.${KEYS[field]}` : `@ext:memlens.torch-memory-lens`,
  );
}
