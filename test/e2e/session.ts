// One e2e session: a scratch directory, code-server with our .vsix installed, and a browser
// showing the workbench. Everything is torn down by close(), also when start() fails half-way.
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { launchBrowser, type OpenBrowser } from './browser';
import { installExtension, prepareDirs, startCodeServer, type CodeServer, type CodeServerDirs } from './codeServer';
import { unexpected } from './noise';
import { artifactsDir, defaultVsix, examplesDir, fixturesDir, repoRoot } from './paths';
import { timeouts } from './timeouts';
import { Workbench } from './workbench';

export interface SessionOptions {
  /** Names the artifacts folder and prefixes screenshots. */
  name: string;
  /** Defaults to $MEMLENS_E2E_VSIX, else out/torch-memory-lens.vsix (checked for staleness). */
  vsix?: string;
  /** The workspace: a folder under test/e2e/fixtures/ or an absolute path (the repository's
   * examples/, the default), copied to a scratch place before opening, without traces or
   * caches. */
  fixture?: string;
  /** Adds to the copied workspace before VS Code starts (files a test needs). */
  prepare?: (workspace: string) => void;
  /** Workspace Trust enabled (restricted-mode tests); off by default. */
  trust?: boolean;
  /** User settings merged over the harness defaults. */
  settings?: Record<string, unknown>;
}

// Quiet, offline, deterministic: no welcome page, tips, update checks, AI panels or git scans.
const defaultSettings: Record<string, unknown> = {
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'workbench.welcomePage.walkthroughs.openOnInstall': false,
  'workbench.secondarySideBar.defaultVisibility': 'hidden',
  'telemetry.telemetryLevel': 'off',
  'update.mode': 'none',
  'extensions.autoCheckUpdates': false,
  // "off", not false: VS Code migrates false by rewriting settings.json at startup, and that
  // save's onWillSave participants time out on a loaded machine (a logged error).
  'extensions.autoUpdate': 'off',
  'extensions.ignoreRecommendations': true,
  'chat.disableAIFeatures': true,
  'git.enabled': false,
  // VS Code in a browser saves edits after a second by default; desktop VS Code does not. Tests
  // of edits (stale annotations, Revert File) need the desktop behaviour.
  'files.autoSave': 'off',
};

/** Newest modification time among the sources that go into the .vsix. */
function newestSource(): { file: string; mtime: number } {
  let newest = { file: '', mtime: 0 };
  const visit = (p: string): void => {
    if (!existsSync(p)) return;
    const st = statSync(p);
    if (st.isDirectory()) {
      for (const e of readdirSync(p)) if (e !== '__pycache__') visit(path.join(p, e));
    } else if (st.mtimeMs > newest.mtime) {
      newest = { file: path.relative(repoRoot, p), mtime: st.mtimeMs };
    }
  };
  for (const p of ['package.json', 'src', 'webview', 'media', 'python/memlens']) visit(path.join(repoRoot, p));
  return newest;
}

/** The .vsix under test: explicit, $MEMLENS_E2E_VSIX, else out/ (refused when stale). */
export function resolveVsix(explicit?: string): string {
  const vsix = explicit ?? process.env.MEMLENS_E2E_VSIX;
  if (vsix) return path.resolve(vsix);
  if (!existsSync(defaultVsix)) throw new Error(`${defaultVsix} is missing: run \`npm run package\` first`);
  // Testing an old build silently is worse than failing: insist on a fresh package.
  const newest = newestSource();
  if (statSync(defaultVsix).mtimeMs < newest.mtime) {
    throw new Error(`${path.relative(repoRoot, defaultVsix)} is older than ${newest.file}: run \`npm run package\``);
  }
  return defaultVsix;
}

export class Session {
  private server: CodeServer | undefined;
  private browser: OpenBrowser | undefined;
  private closed = false;
  readonly workspace: string;
  readonly dirs: CodeServerDirs;

  private constructor(
    readonly options: SessionOptions,
    readonly scratch: string,
  ) {
    this.workspace = path.join(scratch, 'workspace');
    const skip = new Set(['.memlens', '__pycache__', '.pytest_cache']);
    cpSync(path.resolve(fixturesDir, options.fixture ?? examplesDir), this.workspace, {
      recursive: true,
      filter: (src) => !skip.has(path.basename(src)),
    });
    options.prepare?.(this.workspace);
    this.dirs = prepareDirs(scratch, {
      ...defaultSettings,
      ...(options.trust ? { 'security.workspace.trust.startupPrompt': 'never' } : {}),
      ...options.settings,
    });
  }

  /** Starts everything; on any failure tears down what was started and rethrows. */
  static async start(options: SessionOptions): Promise<Session> {
    const vsix = resolveVsix(options.vsix);
    rmSync(path.join(artifactsDir, options.name), { recursive: true, force: true });
    const session = new Session(options, mkdtempSync(path.join(tmpdir(), 'memlens-e2e-')));
    // If the runner dies before close() (interrupt, crash), still leave no scratch behind.
    const removeScratch = (): void => rmSync(session.scratch, { recursive: true, force: true });
    process.once('exit', removeScratch);
    try {
      await installExtension(session.dirs, vsix);
      session.server = await startCodeServer(session.dirs, session.workspace, { trust: options.trust ?? false });
      session.browser = await launchBrowser();
      const url = `${session.server.url}/?folder=${encodeURIComponent(session.workspace)}`;
      await session.browser.page.goto(url, { timeout: timeouts.workbench });
      await session.workbench.waitReady();
    } catch (e) {
      await session.capture('start-failed');
      await session.close();
      throw e;
    }
    return session;
  }

  get workbench(): Workbench {
    if (!this.browser) throw new Error('the browser is not running');
    return new Workbench(this.browser.page);
  }

  get artifacts(): string {
    return path.join(artifactsDir, this.options.name);
  }

  /** Screenshot artifacts/<session>/<label>.png; never throws (used on failure paths). */
  async capture(label: string): Promise<string | undefined> {
    if (!this.browser) return undefined;
    try {
      return await this.workbench.screenshot(`${this.options.name}/${label}`);
    } catch {
      return undefined;
    }
  }

  /** Runs a test step; on failure saves a screenshot named after it, then rethrows. */
  async step<T>(label: string, fn: (wb: Workbench) => Promise<T>): Promise<T> {
    try {
      return await fn(this.workbench);
    } catch (e) {
      const shot = await this.capture(`FAILED-${label}`);
      const dialog = await this.workbench.modalDialog().catch(() => undefined);
      if (e instanceof Error) {
        if (dialog && !e.message.includes(dialog)) e.message += `\n(VS Code shows a dialog: ${dialog})`;
        if (shot) e.message += `\n(screenshot: ${shot})`;
      }
      throw e;
    }
  }

  /** Errors in the browser, code-server and the extension host logs that are not known noise
   * nor `expected` (errors a test provokes on purpose, such as a failing trace's message). */
  unexpectedErrors(expected: RegExp[] = []): string[] {
    return this.errors().filter((e) => !expected.some((p) => p.test(e)));
  }

  private errors(): string[] {
    const log = this.browser?.log;
    const found = [
      ...unexpected((log?.pageErrors ?? []).map((e) => `[page error] ${e}`), /./),
      ...unexpected(log?.console ?? [], /^\[error\]/),
      ...unexpected((this.server?.process.output() ?? '').split('\n'), /\berror\b/i),
    ];
    for (const file of this.vscodeLogFiles()) {
      const lines = readText(file).split('\n');
      found.push(...unexpected(lines, /\[error\]/).map((l) => `${path.basename(file)}: ${l}`));
    }
    return found;
  }

  private vscodeLogFiles(): string[] {
    const root = path.join(this.dirs.userData, 'logs');
    const files: string[] = [];
    const visit = (p: string): void => {
      for (const e of readdirSync(p, { withFileTypes: true })) {
        const full = path.join(p, e.name);
        if (e.isDirectory()) visit(full);
        else if (e.name.endsWith('.log')) files.push(full);
      }
    };
    if (existsSync(root)) visit(root);
    return files;
  }

  /** Saves logs to the artifacts folder, closes the browser, kills code-server's process group
   * and removes the scratch directory. Safe to call more than once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      this.saveLogs();
    } finally {
      await this.browser?.browser.close().catch(() => undefined);
      await this.server?.stop();
      rmSync(this.scratch, { recursive: true, force: true });
    }
  }

  private saveLogs(): void {
    mkdirSync(this.artifacts, { recursive: true });
    const log = this.browser?.log;
    writeFileSync(path.join(this.artifacts, 'code-server.log'), this.server?.process.output() ?? '');
    writeFileSync(
      path.join(this.artifacts, 'browser.log'),
      [...(log?.pageErrors ?? []).map((e) => `[page error] ${e}`), ...(log?.console ?? [])].join('\n'),
    );
    const logs = path.join(this.dirs.userData, 'logs');
    if (existsSync(logs)) cpSync(logs, path.join(this.artifacts, 'vscode-logs'), { recursive: true });
  }
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
