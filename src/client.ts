// The language client: `python -m memlens.server` over stdio, with the settings mapped to what
// the server reads (config.ts), trace progress as notifications (progress.ts), and the few
// places where VS Code should behave differently from a generic LSP client (middleware).
import * as vscode from 'vscode';
import {
  LanguageClient,
  ResponseError,
  RevealOutputChannelOn,
  TransportKind,
  type LanguageClientOptions,
  type Middleware,
  type ServerOptions,
} from 'vscode-languageclient/node';
import { serverLogLevel, serverSettings, type Config } from './config';
import { clientChannel } from './log';
import { TraceProgressFeature, type ProgressEvents } from './progress';
import { SETTINGS_SECTION } from '../common/protocol';
import { isSnapshotPath } from './snapshotFile';

export interface ClientOptions {
  python: string;
  /** The server's cwd: the extension's folder (never the workspace: `-m` imports from cwd). */
  cwd: string;
  log: vscode.LogOutputChannel;
  /** The settings now (re-read on every request: they may change while the server runs). */
  config: () => Config;
  /** The server asked to show a snapshot (memlens.openReport): the panel shows it instead of
   * the JSON text. */
  showSnapshot: (path: string) => void;
  progress?: ProgressEvents;
}

export function createClient(o: ClientOptions): LanguageClient {
  const config = o.config();
  const server: ServerOptions = {
    command: o.python,
    args: ['-m', 'memlens.server', '--log-level', serverLogLevel(config.logLevel)],
    transport: TransportKind.stdio,
    options: { cwd: o.cwd, env: { ...process.env, PYTHONSAFEPATH: '1', PYTHONUNBUFFERED: '1' } },
  };
  const middleware: Middleware = {
    workspace: {
      // The server pulls its section; it gets the mapped settings, not the raw ones.
      configuration: (params, token, next) => {
        if (params.items.length > 0 && params.items.every((i) => i.section === SETTINGS_SECTION)) {
          return params.items.map(() => serverSettings(o.config()));
        }
        return next(params, token);
      },
    },
    window: {
      showDocument: async (params, next) => {
        const uri = vscode.Uri.parse(params.uri);
        if (uri.scheme === 'file' && isSnapshotPath(uri.fsPath)) {
          o.showSnapshot(uri.fsPath);
          return { success: true };
        }
        const result = await next(params, new vscode.CancellationTokenSource().token);
        return result instanceof ResponseError ? { success: false } : result;
      },
    },
    provideInlayHints: (document, range, token, next) =>
      o.config().annotationStyle === 'inlayHints' ? next(document, range, token) : [],
    provideHover: (document, position, token, next) =>
      o.config().annotationStyle === 'off' ? undefined : next(document, position, token),
  };
  const channel = clientChannel(o.log);
  const options: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'python' },
      { scheme: 'file', language: 'shellscript' },
      { scheme: 'file', pattern: '**/.vscode/launch.json' },
    ],
    outputChannel: channel,
    traceOutputChannel: channel,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: { settings: serverSettings(config) },
    diagnosticCollectionName: 'memlens',
    markdown: { isTrusted: false, supportHtml: false },
    middleware,
  };
  const client = new LanguageClient('memlens', 'Torch Memory Lens', server, options);
  client.registerFeature(new TraceProgressFeature(client, o.progress));
  return client;
}
