// Where the time of one "Trace Memory" goes, for the log and bench/: from the command to the
// painted annotations, split into the server's part (finding the target, starting the worker),
// the worker's start (Python and torch imports until its first progress), the trace itself
// (until the new annotations arrive) and the paint. No `vscode` import.

export type Mark = 'command' | 'started' | 'firstProgress' | 'annotations' | 'painted' | 'finished';

export interface TraceTiming {
  targetId: string;
  serverMs: number;
  workerStartMs: number;
  traceMs: number;
  paintMs: number;
  totalMs: number;
}

export class TraceTimer {
  private marks = new Map<Mark, number>();
  private targetId = '';

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A new trace begins (the command was run); earlier marks are forgotten. */
  begin(targetId: string): void {
    this.marks.clear();
    this.targetId = targetId;
    this.marks.set('command', this.now());
  }

  /** Records `mark` once per trace; marks before `begin` or out of order are ignored. */
  mark(mark: Mark): void {
    if (!this.marks.has('command') || this.marks.has(mark)) return;
    const order: Mark[] = ['command', 'started', 'firstProgress', 'annotations', 'painted'];
    const i = order.indexOf(mark);
    if (i > 0 && !this.marks.has(order[i - 1]!)) return;
    this.marks.set(mark, this.now());
  }

  has(mark: Mark): boolean {
    return this.marks.has(mark);
  }

  /** The split, once the annotations are painted; undefined before. */
  result(): TraceTiming | undefined {
    const m = (k: Mark): number | undefined => this.marks.get(k);
    const [c, s, f, a, p] = [m('command'), m('started'), m('firstProgress'), m('annotations'), m('painted')];
    if (c === undefined || s === undefined || f === undefined || a === undefined || p === undefined) return undefined;
    const r = (x: number): number => Math.round(x);
    return {
      targetId: this.targetId,
      serverMs: r(s - c),
      workerStartMs: r(f - s),
      traceMs: r(a - f),
      paintMs: r(p - a),
      totalMs: r(p - c),
    };
  }
}
