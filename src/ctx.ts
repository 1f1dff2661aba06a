// The extension's context: it owns every disposable, the log, the UI parts (annotations, status
// bar, snapshot tree, report panel) and the language client's life: start (after checking the
// interpreter), stop, restart, one at a time. Server notifications are routed to the parts here.
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { DidChangeConfigurationNotification, ExecuteCommandRequest, State, Trace, type LanguageClient } from 'vscode-languageclient/node';
import { AnnotationPainter, uriKey } from './annotations';
import { createClient } from './client';
import { serverSettings, type Config } from './config';
import { Interpreters } from './interpreter';
import { formatBytes, formatDate, formatRank } from '../common/format';
import { createLog } from './log';
import { MemoryPanel } from './panel/memoryPanel';
import { registerMemoryPanel } from './panel/register';
import { pipInstallArgs, verdict } from './probe';
import * as P from '../common/protocol';
import { currentConfig, onDidChangeConfig, openSettings } from './settings';
import { OPEN_REPORT, traceDoneMessage } from './traceDone';
import { SnapshotTree } from './snapshotTree';
import { MemoryStatus } from './statusBar';
import { TraceTimer } from './timings';
import { isTrusted, onDidGrantTrust } from './trust';

const INSTALL = 'Install memlens into this interpreter';
const SELECT = 'Select Interpreter';
const SETTINGS = 'Open Settings';
const SHOW_LOG = 'Show Log';
const GO_TO_ERROR = 'Go to Error';

export class Ctx implements vscode.Disposable {
  readonly log = createLog();
  readonly subscriptions: vscode.Disposable[] = [];
  readonly status: MemoryStatus;
  readonly painter: AnnotationPainter;
  readonly tree: SnapshotTree;
  readonly interpreters: Interpreters;
  readonly timer = new TraceTimer();
  /** The interpreter of the running (or last tried) server. */
  python: string | undefined;
  private client: LanguageClient | undefined;
  private clientSubscriptions: vscode.Disposable[] = [];
  private lifecycle: Promise<void> = Promise.resolve();
  private annotationsHidden = false;
  /** Choose Trace's snapshot for this session (undefined: the newest covering each file). */
  private chosenTrace: string | undefined;
  private readonly targets = new Map<string, P.Target>();
  private readonly running = new Map<string, string>();
  /** The device setting as last seen: a change offers to trace the shown target again. */
  private device: string;

  constructor(readonly extension: vscode.ExtensionContext) {
    const config = currentConfig();
    this.device = config.device;
    this.status = new MemoryStatus();
    this.painter = new AnnotationPainter(config);
    this.tree = new SnapshotTree(this.log);
    this.interpreters = new Interpreters(this.log, extension.extensionPath, extension.workspaceState);
    this.subscriptions.push(this.log, this.status, this.painter, this.tree, this.interpreters);
    // The report panel (src/panel/, shared with the panel's own tests): its serializer and
    // memlens.openPanel.
    registerMemoryPanel(extension, this.log);
    this.painter.onPainted = (uris) => this.onPainted(uris);
    this.subscriptions.push(
      onDidChangeConfig(({ restart }) => this.onConfigChange(restart)),
      this.interpreters.onDidChange(() => {
        if (!currentConfig().python) {
          this.log.info('the Python extension changed the active interpreter: restarting the server');
          void this.restart();
        }
      }),
      onDidGrantTrust(() => {
        this.log.info('the workspace is now trusted: starting the server');
        void this.start();
      }),
      vscode.window.onDidChangeActiveTextEditor((e) => {
        const p = e && this.painter.paramsOf(e.document.uri);
        if (p?.snapshot) this.status.setSnapshot(p.snapshot, p.chosen);
      }),
    );
    void vscode.commands.executeCommand('setContext', 'memlens.annotationsHidden', false);
  }

  /** The settings, with Toggle Annotations applied. */
  config(): Config {
    const c = currentConfig();
    if (this.annotationsHidden) return { ...c, annotationStyle: 'off' };
    return c;
  }

  get serverRunning(): boolean {
    return this.client?.state === State.Running;
  }

  // -- the server's life ------------------------------------------------------------------
  start(): Promise<void> {
    return this.queue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.queue(() => this.doStop());
  }

  restart(): Promise<void> {
    return this.queue(async () => {
      await this.doStop();
      await this.doStart();
    });
  }

  /** The running client, starting it if needed; undefined (the user was told why) if it cannot. */
  async readyClient(): Promise<LanguageClient | undefined> {
    await this.lifecycle;
    if (!this.client && isTrusted()) await this.start();
    return this.client?.state === State.Running ? this.client : undefined;
  }

  private queue(step: () => Promise<void>): Promise<void> {
    const next = this.lifecycle.then(step, step);
    this.lifecycle = next.catch(() => undefined);
    return next;
  }

  private async doStart(): Promise<void> {
    if (this.client) return;
    if (!isTrusted()) {
      this.status.setServer({ kind: 'untrusted' });
      this.log.info('Restricted Mode: the server is not started; snapshots can be viewed');
      return;
    }
    const started = performance.now();
    this.status.setServer({ kind: 'starting' });
    const config = currentConfig();
    const interpreter = await this.interpreters.resolve(config);
    this.python = interpreter.path;
    const where = { setting: 'the memlens.python setting', selected: 'Select Interpreter', pythonExtension: 'the Python extension', path: 'PATH' }[interpreter.source];
    this.log.info(`interpreter ${interpreter.path} (from ${where})`);
    const probe = await this.interpreters.probe(interpreter.path);
    if (probe instanceof Error) {
      this.status.setServer({ kind: 'stopped', why: probe.message });
      this.offerFix(`Memlens: ${probe.message}. Choose a Python with memlens and torch installed.`, false);
      return;
    }
    this.python = probe.executable;
    this.log.info(
      `Python ${probe.pythonVersion} at ${probe.executable}: memlens ${probe.memlensVersion ?? (probe.memlens ? '(unknown version)' : 'missing')}, torch ${probe.torchVersion ?? (probe.torch ? '(unknown version)' : 'missing')}`,
    );
    const v = verdict(probe, probe.executable);
    if (v.kind === 'oldPython' || v.kind === 'noMemlens') {
      this.status.setServer({ kind: 'stopped', why: v.message });
      this.offerFix(`Memlens: ${v.message}`, v.kind === 'noMemlens');
      return;
    }
    if (v.kind === 'noTorch') this.offerFix(`Memlens: ${v.message}`, false);

    const client = createClient({
      python: probe.executable,
      cwd: this.extension.extensionPath,
      log: this.log,
      config: () => this.config(),
      showSnapshot: (p) => this.showReport(p),
      progress: { onReport: () => this.timer.mark('firstProgress') },
    });
    this.client = client;
    this.clientSubscriptions = [
      client.onNotification(P.NOTIFY_ANNOTATIONS, (p: P.AnnotationsParams) => this.onAnnotations(p)),
      client.onNotification(P.NOTIFY_TRACE_STARTED, (p: P.TraceStartedParams) => this.onTraceStarted(p)),
      client.onNotification(P.NOTIFY_TRACE_FINISHED, (r: P.TraceResult) => this.onTraceFinished(r)),
      client.onNotification(P.NOTIFY_SNAPSHOTS_CHANGED, () => this.tree.refreshSoon()),
      client.onDidChangeState((e) => {
        if (e.newState === State.Stopped && this.client === client) {
          this.status.setServer({ kind: 'stopped', why: 'the server exited (see the log)' });
          this.painter.clear();
        } else if (e.newState === State.Running) {
          this.status.setServer({ kind: 'running' });
        }
      }),
    ];
    try {
      await client.start();
      await client.setTrace(config.logLevel === 'trace' ? Trace.Verbose : Trace.Off);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      this.log.error(`the language server did not start: ${why}`);
      this.status.setServer({ kind: 'stopped', why });
      await this.disposeClient();
      void vscode.window.showErrorMessage(`Memlens: the language server did not start: ${why}`, SHOW_LOG).then((c) => {
        if (c === SHOW_LOG) this.log.show();
      });
      return;
    }
    this.status.setServer({ kind: 'running' });
    if (this.chosenTrace) await this.sendChoice(client, this.chosenTrace);
    this.log.info(`server ready in ${Math.round(performance.now() - started)} ms`);
  }

  private async doStop(): Promise<void> {
    if (!this.client) return;
    this.log.info('stopping the server');
    await this.disposeClient();
    this.running.clear();
    this.status.setTracing(undefined);
    this.status.setServer({ kind: 'starting' });
  }

  private async disposeClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    for (const s of this.clientSubscriptions) s.dispose();
    this.clientSubscriptions = [];
    this.painter.clear();
    try {
      if (client && client.state !== State.Stopped) await client.stop(10_000);
    } catch (e) {
      this.log.warn(`stopping the server: ${e instanceof Error ? e.message : String(e)}`);
    }
    try {
      await client?.dispose();
    } catch {
      // already stopped
    }
  }

  /** Says what is wrong with the interpreter, with ways out. Not awaited: never blocks. */
  private offerFix(message: string, canInstall: boolean): void {
    this.log.warn(message);
    const actions = [...(canInstall ? [INSTALL] : []), SELECT, SETTINGS];
    void vscode.window.showWarningMessage(message, ...actions).then((choice) => {
      if (choice === INSTALL) void vscode.commands.executeCommand('memlens.installMemlens');
      if (choice === SELECT) void vscode.commands.executeCommand('memlens.selectInterpreter');
      if (choice === SETTINGS) void openSettings('python');
    });
  }

  /** `<python> -m pip install <extension>/python`, then a restart. */
  async installMemlens(): Promise<void> {
    const python = this.python ?? (await this.interpreters.resolve(currentConfig())).path;
    const pkg = path.join(this.extension.extensionPath, 'python');
    const args = pipInstallArgs(pkg);
    this.log.info(`running ${python} ${args.join(' ')}`);
    const code = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Installing memlens into ${python}…` },
      () =>
        new Promise<number | string>((resolve) => {
          const proc = spawn(python, args, { cwd: this.extension.extensionPath, env: process.env });
          proc.stdout.setEncoding('utf8').on('data', (d: string) => this.log.info(d.trimEnd()));
          proc.stderr.setEncoding('utf8').on('data', (d: string) => this.log.warn(d.trimEnd()));
          proc.on('error', (e) => resolve(e.message));
          proc.on('exit', (c, signal) => resolve(c ?? signal ?? 'unknown'));
        }),
    );
    if (code === 0) {
      void vscode.window.showInformationMessage(`Memlens: memlens is installed in ${python}.`);
      await this.restart();
    } else {
      void vscode.window.showErrorMessage(`Memlens: pip could not install memlens into ${python} (${code}).`, SHOW_LOG).then((c) => {
        if (c === SHOW_LOG) this.log.show();
      });
    }
  }

  // -- settings and annotations -----------------------------------------------------------
  private onConfigChange(restart: boolean): void {
    const c = this.config();
    this.painter.configure(c.annotationStyle, c.annotationThreshold);
    if (c.device !== this.device) {
      this.device = c.device;
      this.offerTraceAgain(c.device);
    }
    if (restart) {
      this.log.info('a setting that decides how the server starts changed: restarting it');
      void this.restart();
    } else {
      this.pushSettings();
    }
  }

  /** After Select Device or a settings edit the annotations still show the old device's trace:
   * say so, and offer to trace the shown target on the new one. */
  private offerTraceAgain(device: string): void {
    const shown = this.status.current;
    if (!shown?.targetId) return;
    const targetId = shown.targetId;
    const again = 'Trace Again';
    const now = device || "the recipe's device (else h100-80gb)";
    void vscode.window
      .showInformationMessage(`Memlens: traces now target ${now}; ${shown.targetName} shows its trace on ${shown.device}.`, again)
      .then((choice) => {
        if (choice === again) void vscode.commands.executeCommand('memlens.traceMemory', { targetId });
      });
  }

  private pushSettings(): void {
    const client = this.client;
    if (client?.state !== State.Running) return;
    void client
      .sendNotification(DidChangeConfigurationNotification.type, {
        settings: { [P.SETTINGS_SECTION]: serverSettings(this.config()) },
      })
      .then(() => this.refreshVisible(client))
      .catch((e: unknown) => this.log.warn(`updating the server's settings: ${e instanceof Error ? e.message : String(e)}`));
  }

  /**
   * Asks again for the annotations of the visible documents: a budget or device change alters
   * the snapshot info (the status bar) and the hovers without a new trace. memlens/targets
   * goes first as a barrier: the server handles it after the settings notification sent before
   * it (both run as tasks, in order), while memlens/documentAnnotations is answered at once.
   */
  private async refreshVisible(client: LanguageClient): Promise<void> {
    await client.sendRequest<P.TargetsResult>(P.REQ_TARGETS, {} satisfies P.TargetsParams);
    const selector = client.clientOptions.documentSelector ?? [];
    for (const editor of vscode.window.visibleTextEditors) {
      // Only documents the server follows: it refuses others (and the client logs an error).
      if (client !== this.client || !vscode.languages.match(selector as vscode.DocumentSelector, editor.document)) continue;
      const params: P.DocumentParams = { uri: client.code2ProtocolConverter.asUri(editor.document.uri) };
      try {
        this.onAnnotations(await client.sendRequest<P.AnnotationsParams>(P.REQ_DOCUMENT_ANNOTATIONS, params));
      } catch {
        // closed meanwhile: nothing to refresh
      }
    }
  }

  /** Hides or shows annotations for this session (the setting stays as it is). */
  toggleAnnotations(): boolean {
    this.annotationsHidden = !this.annotationsHidden;
    void vscode.commands.executeCommand('setContext', 'memlens.annotationsHidden', this.annotationsHidden);
    const c = this.config();
    const style = !this.annotationsHidden && c.annotationStyle === 'off' ? 'decorations' : c.annotationStyle;
    this.painter.configure(style, c.annotationThreshold);
    this.pushSettings();
    return !this.annotationsHidden;
  }

  // -- server notifications ---------------------------------------------------------------
  private onAnnotations(p: P.AnnotationsParams): void {
    this.painter.update(p);
    if (p.snapshot && this.timer.has('firstProgress')) this.timer.mark('annotations');
    const active = vscode.window.activeTextEditor;
    if (p.snapshot && active && uriKey(active.document.uri) === uriKey(p.uri)) this.status.setSnapshot(p.snapshot, p.chosen);
  }

  /** Choose Trace: the server annotates with `snapshot`'s target (null: the newest); kept for
   * the session, sent again when the server restarts. */
  async chooseTrace(snapshot: string | null): Promise<void> {
    this.chosenTrace = snapshot ?? undefined;
    const client = await this.readyClient();
    if (client) await this.sendChoice(client, snapshot);
  }

  private async sendChoice(client: LanguageClient, snapshot: string | null): Promise<void> {
    try {
      await client.sendRequest(ExecuteCommandRequest.type, { command: P.CMD_CHOOSE_TRACE, arguments: [{ snapshot } satisfies P.ChooseTraceParams] });
    } catch (e) {
      this.chosenTrace = undefined; // gone (deleted, another workspace): back to the newest
      this.log.warn(`Choose Trace: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  private onTraceStarted(p: P.TraceStartedParams): void {
    this.targets.set(p.targetId, p.target);
    this.running.set(p.targetId, p.target.name);
    this.painter.traceStarted(p);
    this.status.setTracing([...this.running.values()].join(', '));
    this.timer.mark('started');
  }

  /** A trace ended: the reply to this window's own memlens.trace, or the server's
   * memlens/traceFinished for a trace no request asked for (trace on save). */
  onTraceFinished(r: P.TraceResult): void {
    this.running.delete(r.targetId);
    this.painter.traceFinished(r);
    this.status.setTracing(this.running.size ? [...this.running.values()].join(', ') : undefined);
    this.timer.mark('finished');
    if (r.snapshot) {
      // The active editor keeps the trace the server shows in it (its annotations follow);
      // the status bar takes this one only where no editor shows a trace.
      const active = vscode.window.activeTextEditor;
      if (!(active && this.painter.snapshotOf(active.document.uri))) this.status.setSnapshot(r.snapshot, false);
      this.tree.refreshSoon();
    }
    const name = this.targets.get(r.targetId)?.name ?? r.targetId;
    this.log.info(`trace of ${name}: ${r.status} in ${r.durationS.toFixed(1)} s`);
    if (r.status === 'failed' || r.status === 'timeout') this.showTraceError(name, r);
    if (r.status === 'ok' && r.snapshot) {
      const snapshot = r.snapshot.path;
      void vscode.window.showInformationMessage(traceDoneMessage(name, r.snapshot), OPEN_REPORT).then((choice) => {
        if (choice === OPEN_REPORT) this.showReport(snapshot);
      });
    }
  }

  private showTraceError(name: string, r: P.TraceResult): void {
    const e = r.error;
    const what = r.status === 'timeout' ? 'timed out' : 'failed';
    const where = e?.file && e.line ? ` (${path.basename(e.file)}:${e.line})` : '';
    const actions = [...(e?.file && e.line ? [GO_TO_ERROR] : []), SHOW_LOG];
    void vscode.window
      .showErrorMessage(`Memlens: the trace of ${name} ${what}${where}: ${e?.message ?? 'no reason was given'}`, ...actions)
      .then(async (choice) => {
        if (choice === SHOW_LOG) this.log.show();
        if (choice === GO_TO_ERROR && e?.file && e.line) {
          const line = Math.max(0, e.line - 1);
          await vscode.window.showTextDocument(vscode.Uri.file(e.file), { selection: new vscode.Range(line, 0, line, 0) });
        }
      });
  }

  private onPainted(uris: string[]): void {
    if (uris.length === 0 || !this.timer.has('annotations') || this.timer.has('painted')) return;
    this.timer.mark('painted');
    const t = this.timer.result();
    if (t) this.log.info(`timing ${JSON.stringify({ event: 'trace', ...t })}`);
  }

  // -- the report and pickers -------------------------------------------------------------
  /** Shows a snapshot (and optionally a second to compare with) in the report panel. */
  showReport(snapshot: string, compare?: string): void {
    MemoryPanel.show(this.extension, vscode.Uri.file(snapshot), compare ? vscode.Uri.file(compare) : undefined, this.log);
  }

  async pickSnapshot(title: string, exclude?: string): Promise<string | undefined> {
    const entries = (await this.tree.entries()).filter((e) => e.path !== exclude);
    if (entries.length === 0) {
      void vscode.window.showInformationMessage('Memlens: no snapshot to choose from yet. Run Memlens: Trace Memory first.');
      return undefined;
    }
    const picked = await vscode.window.showQuickPick(
      entries.map((e) => ({
        label: `${e.targetName} · ${formatBytes(e.peakBytes)} peak`,
        description: `${e.device} · ${formatRank(e.rank, e.worldSize)} · ${formatDate(e.created)}`,
        detail: vscode.workspace.asRelativePath(e.path),
        path: e.path,
      })),
      { title, matchOnDescription: true, matchOnDetail: true },
    );
    return picked?.path;
  }

  async dispose(): Promise<void> {
    await this.disposeClient();
    for (const d of this.subscriptions.splice(0).reverse()) d.dispose();
  }
}
