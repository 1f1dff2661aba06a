// Trace progress as a cancellable notification. The server reports a trace with standard LSP
// work-done progress (title "Tracing GPT", messages "rank 0 · forward/backward, iteration 1",
// a percentage); vscode-languageclient would show that in the status bar only, so this feature
// takes over `window/workDoneProgress/create` (it initializes after the built-in one) and shows
// each progress as a notification whose Cancel sends `window/workDoneProgress/cancel`.
import * as vscode from 'vscode';
import type { BaseLanguageClient, ClientCapabilities, FeatureState, StaticFeature } from 'vscode-languageclient';
import {
  WorkDoneProgress,
  WorkDoneProgressCancelNotification,
  WorkDoneProgressCreateRequest,
  type ProgressToken,
  type WorkDoneProgressBegin,
  type WorkDoneProgressEnd,
  type WorkDoneProgressReport,
} from 'vscode-languageclient';

export interface ProgressEvents {
  /** Every report after the first one that is not "starting" (the worker is running). */
  onReport?(message: string): void;
}

type Value = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;

export class TraceProgressFeature implements StaticFeature {
  private readonly active = new Map<ProgressToken, () => void>();

  constructor(
    private readonly client: BaseLanguageClient,
    private readonly events: ProgressEvents = {},
  ) {}

  fillClientCapabilities(capabilities: ClientCapabilities): void {
    capabilities.window = capabilities.window ?? {};
    capabilities.window.workDoneProgress = true;
  }

  initialize(): void {
    this.client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => this.create(token));
  }

  getState(): FeatureState {
    return { kind: 'static' };
  }

  clear(): void {
    for (const end of this.active.values()) end();
    this.active.clear();
  }

  private create(token: ProgressToken): void {
    let progress: vscode.Progress<{ message?: string; increment?: number }> | undefined;
    let percentage = 0;
    let shown = 0;
    let lastMessage: string | undefined;
    let finish: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const listener = this.client.onProgress(WorkDoneProgress.type, token, (value: Value) => {
      switch (value.kind) {
        case 'begin':
          void vscode.window.withProgress(
            { location: vscode.ProgressLocation.Notification, title: value.title, cancellable: value.cancellable ?? false },
            async (p, cancel) => {
              progress = p;
              cancel.onCancellationRequested(() => {
                void this.client.sendNotification(WorkDoneProgressCancelNotification.type, { token });
              });
              report(value.message ?? lastMessage, value.percentage);
              await finished;
            },
          );
          break;
        case 'report':
          report(value.message, value.percentage);
          break;
        case 'end':
          end();
          break;
      }
    });
    // Reports may arrive before the notification exists: keep the newest until it does.
    const report = (message: string | undefined, pct: number | undefined): void => {
      if (message !== undefined) lastMessage = message;
      if (pct !== undefined && pct > percentage) percentage = pct;
      if (message && message !== 'starting') this.events.onReport?.(message);
      if (!progress) return;
      const step: { message?: string; increment?: number } = {};
      if (lastMessage !== undefined) step.message = lastMessage;
      if (percentage > shown) {
        step.increment = percentage - shown;
        shown = percentage;
      }
      progress.report(step);
    };
    const end = (): void => {
      listener.dispose();
      this.active.delete(token);
      finish();
    };
    this.active.set(token, end);
  }
}
