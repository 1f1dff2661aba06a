// Which Python runs the server (and, through it, the trace workers): the `memlens.python`
// setting if set, else the Python extension's active environment (followed as it changes),
// else `python3` on PATH. The Python extension is optional: code-server and offline machines
// often do not have it.
import { execFile } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { PythonExtension } from '@vscode/python-extension';
import * as vscode from 'vscode';
import type { Config } from './config';
import { PROBE_SCRIPT, parseProbe, type Probe } from './probe';
import { updateSetting } from './settings';

const PYTHON_EXTENSION_ID = 'ms-python.python';

export type InterpreterSource = 'setting' | 'pythonExtension' | 'path';

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
  ) {}

  async resolve(config: Config): Promise<Interpreter> {
    if (config.python) return { path: expand(config.python), source: 'setting' };
    const fromExtension = await this.fromPythonExtension();
    if (fromExtension) return { path: fromExtension, source: 'pythonExtension' };
    return { path: 'python3', source: 'path' };
  }

  private async fromPythonExtension(): Promise<string | undefined> {
    if (!vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) return undefined;
    try {
      if (!this.api) {
        this.api = await PythonExtension.api();
        this.subscription = this.api.environments.onDidChangeActiveEnvironmentPath(() => this.changed.fire());
      }
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

  /** Lets the user choose: the Python extension's picker when it is there, else a file dialog
   * that sets `memlens.python`. */
  async select(): Promise<void> {
    if (vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) {
      await vscode.commands.executeCommand('python.setInterpreter');
      return;
    }
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const picked = await vscode.window.showOpenDialog({
      title: 'Python interpreter for Torch Memory Lens (with memlens and torch installed)',
      canSelectFiles: true,
      canSelectFolders: false,
      canSelectMany: false,
      openLabel: 'Use this interpreter',
      ...(folder ? { defaultUri: folder } : {}),
    });
    const file = picked?.[0];
    if (file) await updateSetting('python', file.fsPath);
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
