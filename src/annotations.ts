// Inline annotations: one decoration type, after-line text painted from the server's
// memlens/annotations notifications (annotationModel.ts decides what), in the visible editors
// only, repainted at most every PAINT_DELAY_MS. Hovers and inlay hints come from the server
// through the language client, not from here.
import * as vscode from 'vscode';
import { toPaint } from './annotationModel';
import type { AnnotationStyle, Config } from './config';
import type { AnnotationsParams, TraceResult, TraceStartedParams } from '../common/protocol';

const PAINT_DELAY_MS = 10;

/** The key of a document across the server's URIs and VS Code's (they may encode differently). */
export function uriKey(uri: string | vscode.Uri): string {
  return (typeof uri === 'string' ? vscode.Uri.parse(uri) : uri).toString();
}

export class AnnotationPainter implements vscode.Disposable {
  private readonly type = vscode.window.createTextEditorDecorationType({
    after: { margin: '0 0 0 2.5em' },
    rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
  });
  private readonly docs = new Map<string, AnnotationsParams>();
  /** Documents edited since the server last described them. */
  private readonly editedSince = new Set<string>();
  /** Traces running: targetId -> the document and line of the target. */
  private readonly tracing = new Map<string, { uri: string; line: number }>();
  private readonly disposables: vscode.Disposable[] = [];
  private timer: NodeJS.Timeout | undefined;
  private style: AnnotationStyle;
  private threshold: number;
  /** Called after each paint with the documents painted (for timings). */
  onPainted: ((uris: string[]) => void) | undefined;

  constructor(config: Config) {
    this.style = config.annotationStyle;
    this.threshold = config.annotationThreshold;
    this.disposables.push(
      vscode.window.onDidChangeVisibleTextEditors(() => this.schedule()),
      vscode.workspace.onDidChangeTextDocument((e) => {
        const key = uriKey(e.document.uri);
        const known = this.docs.get(key);
        if (e.contentChanges.length > 0 && known && known.annotations.length > 0 && !this.editedSince.has(key)) {
          this.editedSince.add(key);
          this.schedule();
        }
      }),
      vscode.workspace.onDidCloseTextDocument((d) => {
        this.docs.delete(uriKey(d.uri));
        this.editedSince.delete(uriKey(d.uri));
      }),
    );
  }

  /** The effective style (settings, or Toggle Annotations) and threshold. */
  configure(style: AnnotationStyle, threshold: number): void {
    if (style === this.style && threshold === this.threshold) return;
    this.style = style;
    this.threshold = threshold;
    this.schedule();
  }

  update(params: AnnotationsParams): void {
    const key = uriKey(params.uri);
    this.docs.set(key, params);
    this.editedSince.delete(key);
    this.schedule();
  }

  /** The snapshot the server associates with a document, if any. */
  snapshotOf(uri: vscode.Uri): AnnotationsParams['snapshot'] {
    return this.docs.get(uriKey(uri))?.snapshot ?? null;
  }

  /** What the server last said of a document: its one snapshot and whether it was chosen. */
  paramsOf(uri: vscode.Uri): AnnotationsParams | undefined {
    return this.docs.get(uriKey(uri));
  }

  traceStarted(p: TraceStartedParams): void {
    this.tracing.set(p.targetId, { uri: uriKey(p.target.uri), line: p.target.range.start.line });
    this.schedule();
  }

  traceFinished(r: TraceResult): void {
    if (this.tracing.delete(r.targetId)) this.schedule();
  }

  /** The server stopped: nothing it said stands any more. */
  clear(): void {
    this.docs.clear();
    this.editedSince.clear();
    this.tracing.clear();
    this.schedule();
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.paint();
    }, PAINT_DELAY_MS);
  }

  private paint(): void {
    const painted: string[] = [];
    for (const editor of vscode.window.visibleTextEditors) {
      const key = uriKey(editor.document.uri);
      const params = this.docs.get(key);
      const tracingLines = [...this.tracing.values()].filter((t) => t.uri === key).map((t) => t.line);
      const items = toPaint({
        annotations: params?.annotations ?? [],
        stale: (params?.stale ?? false) || this.editedSince.has(key),
        tracingLines,
        style: this.style,
        threshold: this.threshold,
        lineCount: editor.document.lineCount,
      });
      editor.setDecorations(
        this.type,
        items.map((item) => {
          // A zero-width range at the end of the line: the text follows the code.
          const end = editor.document.lineAt(item.line).range.end;
          return {
            range: new vscode.Range(end, end),
            renderOptions: {
              after: {
                contentText: item.text,
                color: new vscode.ThemeColor(item.color),
                fontStyle: item.italic ? 'italic' : 'normal',
              },
            },
          };
        }),
      );
      if (items.length > 0) painted.push(key);
    }
    this.onPainted?.(painted);
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.type.dispose();
    for (const d of this.disposables) d.dispose();
  }
}
