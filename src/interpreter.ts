// Which Python runs the server (and, through it, the trace workers): the `memlens.python`
// setting if set, else the one chosen with Select Interpreter (kept in the workspace's state,
// not written into .vscode/settings.json unless the user asks), else the Python extension's
// active environment (followed as it changes), else `python3` on PATH. The Python extension is optional: code-server and offline machines
// often do not have it.
import { execFile } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { PythonExtension } from '@vscode/python-extension';
import * as vscode from 'vscode';
import type { Config } from './config';
import { interpreterPicks, type KnownEnvironment } from './interpreterPicks';
import { PROBE_SCRIPT, parseProbe, type Probe } from './probe';
import { updateSetting } from './settings';

const PYTHON_EXTENSION_ID = 'ms-python.python';
const SELECTED_KEY = 'memlens.selectedPython';

export type InterpreterSource = 'setting' | 'selected' | 'pythonExtension' | 'path';

export interface Interpreter {
  /** An executable path, or a command name resolved on PATH. */
  path: string;
  source: InterpreterSource;
}

export class Interpreters implements vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<void>();
  /** The Python extension's active environment changed (matters only without the setting). */
  readonly onDidChange = this.changed.event;
  private api: PythonExtension | undefined;
  private subscription: vscode.Disposable | undefined;

  constructor(
    private readonly log: vscode.LogOutputChannel,
    /** The installed extension's folder: a safe cwd for probing. */
    private readonly extensionPath: string,
    /** The workspace's state: where Select Interpreter keeps its choice. */
    private readonly state: vscode.Memento,
  ) {}

  async resolve(config: Config): Promise<Interpreter> {
    if (config.python) return { path: expand(config.python), source: 'setting' };
    const selected = this.state.get<string>(SELECTED_KEY);
    if (selected) return { path: selected, source: 'selected' };
    const fromExtension = await this.fromPythonExtension();
    if (fromExtension) return { path: fromExtension, source: 'pythonExtension' };
    return { path: 'python3', source: 'path' };
  }

  private async pythonApi(): Promise<PythonExtension | undefined> {
    if (!vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) return undefined;
    if (!this.api) {
      this.api = await PythonExtension.api();
      this.subscription = this.api.environments.onDidChangeActiveEnvironmentPath(() => this.changed.fire());
    }
    return this.api;
  }

  private async fromPythonExtension(): Promise<string | undefined> {
    if (!vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) return undefined;
    try {
      this.api = await this.pythonApi();
      if (!this.api) return undefined;
      const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
      const env = await this.api.environments.resolveEnvironment(this.api.environments.getActiveEnvironmentPath(folder));
      return env?.executable.uri?.fsPath;
    } catch (e) {
      this.log.warn(`the Python extension did not name an interpreter: ${e instanceof Error ? e.message : String(e)}`);
      return undefined;
    }
  }

  /** Asks the interpreter what it has. An Error when it cannot be run at all. */
  probe(python: string): Promise<Probe | Error> {
    return new Promise((resolve) => {
      // The extension's own folder as cwd: `python -c` puts the cwd first on sys.path, and a
      // workspace could hold a `memlens` or `torch` of its own.
      execFile(
        python,
        ['-c', PROBE_SCRIPT],
        { cwd: this.extensionPath, timeout: 60_000, env: { ...process.env, PYTHONSAFEPATH: '1' } },
        (error, stdout, stderr) => {
          if (error) {
            const why = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'not found' : stderr.trim() || error.message;
            resolve(new Error(`cannot run ${python}: ${why}`));
            return;
          }
          resolve(parseProbe(stdout));
        },
      );
    });
  }

  /** Lets the user choose among the Python extension's discovered environments (else a file
   * dialog). The choice is kept in the workspace's state — an absolute path is not written
   * into .vscode/settings.json unless the user asks. True when the interpreter changed. */
  async select(current: string | undefined): Promise<boolean> {
    let known: KnownEnvironment[] = [];
    let api: PythonExtension | undefined;
    try {
      api = await this.pythonApi();
      if (api) await api.environments.refreshEnvironments().catch(() => undefined);
      known = (api?.environments.known ?? []).map((e) => ({
        executable: e.executable.uri?.fsPath,
        name: e.environment?.name,
        type: e.environment?.type,
        version: e.version?.major !== undefined ? [e.version.major, e.version.minor, e.version.micro].filter((n) => n !== undefined).join('.') : undefined,
      }));
    } catch (e) {
      this.log.warn(`the Python extension did not list its environments: ${e instanceof Error ? e.message : String(e)}`);
    }
    const picks = interpreterPicks(known, current, api !== undefined, (p) => vscode.workspace.asRelativePath(p));
    const picked = known.length === 0 && !api
      ? picks[picks.length - 1] // no list to show: straight to the file dialog
      : await vscode.window.showQuickPick(picks, { title: 'Python interpreter for Torch Memory Lens (with memlens and torch installed)', matchOnDetail: true });
    if (!picked) return false;
    let chosen: string | undefined;
    if (picked.action === 'environment') chosen = picked.path;
    else if (picked.action === 'browse') chosen = await this.browse();
    if (picked.action !== 'pythonExtension' && !chosen) return false;
    await this.state.update(SELECTED_KEY, chosen);
    if (vscode.workspace.getConfiguration('memlens').get<string>('python')) {
      void vscode.window.showWarningMessage('Memlens: the memlens.python setting is set and takes precedence over this choice; clear it to use the interpreter chosen here.');
    } else if (chosen) {
      const save = 'Save in Workspace Settings';
      void vscode.window
        .showInformationMessage(`Memlens uses ${vscode.workspace.asRelativePath(chosen)} in this workspace (kept by VS Code, not in your settings files).`, save)
        .then((c) => (c === save ? updateSetting('python', chosen) : undefined));
    }
    return true;
  }

  private async browse(): Promise<string | undefined> {
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const picked = await vscode.window.showOpenDialog({
      title: 'Python interpreter for Torch Memory Lens (with memlens and torch installed)',
      canSelectFiles: true,
      canSelectFolders: false,
      canSelectMany: false,
      openLabel: 'Use this interpreter',
      ...(folder ? { defaultUri: folder } : {}),
    });
    return picked?.[0]?.fsPath;
  }

  dispose(): void {
    this.subscription?.dispose();
    this.changed.dispose();
  }
}

/** `~`, `${workspaceFolder}` and paths relative to the workspace, as users write them. */
function expand(p: string): string {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? '';
  let out = p.replace(/\$\{workspaceFolder\}/g, folder);
  if (out === '~' || out.startsWith('~/')) out = path.join(os.homedir(), out.slice(1));
  else if (folder && !path.isAbsolute(out) && /[\\/]/.test(out)) out = path.join(folder, out);
  return out;
}
