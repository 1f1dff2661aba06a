// Every method of the memlens language server beyond standard LSP: the mirror of
// python/memlens/server/protocol.py, declared once here. test/unit/protocol.test.ts compares
// this file with the Python declarations (names, payload types, fields, optionality), so a
// change on either side that is not made on both fails the unit tests.
//
// Conventions (as in the Python module): payload keys are camelCase; sizes are integers of
// bytes; lines are 0-based (LSP); `uri` is a file:// URI, `path` a file system path.
// No `vscode` import: plain declarations, usable from unit tests.

// -- commands (workspace/executeCommand; arguments: one object) ------------------------------
export const CMD_TRACE = 'memlens.trace'; // TraceParams -> TraceResult (when the trace ends)
export const CMD_CANCEL_TRACE = 'memlens.cancelTrace'; // CancelTraceParams -> CancelTraceResult
export const CMD_OPEN_REPORT = 'memlens.openReport'; // OpenReportParams -> OpenReportResult
export const CMD_FIT = 'memlens.fit'; // FitParams -> FitResult (when the search ends)
export const CMD_CHOOSE_TRACE = 'memlens.chooseTrace'; // ChooseTraceParams -> ChooseTraceResult

// -- requests, client -> server ---------------------------------------------------------------
export const REQ_TARGETS = 'memlens/targets'; // TargetsParams -> TargetsResult
export const REQ_DOCUMENT_ANNOTATIONS = 'memlens/documentAnnotations'; // DocumentParams -> AnnotationsParams
export const REQ_SNAPSHOTS = 'memlens/snapshots'; // EmptyParams -> SnapshotsResult
export const REQ_SERVER_INFO = 'memlens/serverInfo'; // EmptyParams -> ServerInfo
export const REQ_FIT_SPACE = 'memlens/fitSpace'; // FitSpaceParams -> FitSpaceResult
export const REQ_DOCUMENT_TRACES = 'memlens/documentTraces'; // DocumentTracesParams -> DocumentTracesResult

// -- notifications, server -> client ----------------------------------------------------------
export const NOTIFY_ANNOTATIONS = 'memlens/annotations'; // AnnotationsParams
export const NOTIFY_TRACE_STARTED = 'memlens/traceStarted'; // TraceStartedParams
export const NOTIFY_TRACE_FINISHED = 'memlens/traceFinished'; // TraceResult
export const NOTIFY_SNAPSHOTS_CHANGED = 'memlens/snapshotsChanged'; // SnapshotsResult

export const SETTINGS_SECTION = 'memlens';
export const DIAGNOSTIC_SOURCE = 'memlens';

export type TargetKind = 'model' | 'script' | 'launch' | 'torchrun';
export type TraceStatus = 'ok' | 'failed' | 'cancelled' | 'timeout' | 'replaced';
export type AnnotationKind = 'class' | 'construct' | 'line';
export type FitVerdict = 'fits' | 'oom' | 'error';
export type FitSort = 'gpus' | 'micro-batch' | 'recompute' | 'peak';

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface SnapshotInfo {
  path: string;
  uri: string;
  /** The target it belongs to, when the server knows it. */
  targetId: string | null;
  targetName: string;
  /** meta.target.kind */
  kind: string;
  /** ISO 8601, UTC */
  created: string;
  peakBytes: number;
  peakPhase: string | null;
  /** meta.device.name */
  device: string;
  deviceTotalBytes: number;
  /** The budget diagnostics compare the peak with. */
  budgetBytes: number;
  /** The snapshot's verdict: the device's memory less (reserved peak + outside the allocator),
   * as `memlens show` and the panel say it (common/headroom.ts); null for a snapshot without one. */
  fits: boolean | null;
  headroomBytes: number | null;
  rank: number;
  worldSize: number;
}

export interface Target {
  id: string;
  kind: TargetKind;
  name: string;
  /** The file that defines it: model file, script, launch.json, shell script. */
  uri: string;
  /** Where its CodeLens and diagnostics go. */
  range: Range;
  /** One line for pickers. */
  detail: string;
  /** A trace of it is running. */
  tracing: boolean;
  /** model: the class or factory */
  symbol?: string;
  /** script, launch, torchrun: the training script (absolute path) */
  program?: string;
  /** launch, torchrun: `-m package.module` instead of a program */
  module?: string;
  args?: string[];
  cwd?: string;
  /** torchrun / launch configurations that run torchrun */
  worldSize?: number;
  /** The newest snapshot of this target. */
  snapshot?: SnapshotInfo;
}

export interface TraceParams {
  /** A Target.id from memlens/targets, or: */
  targetId?: string;
  /** a target given in full (kind and uri, plus symbol for a model) */
  target?: Target;
  /** Default: the `memlens.device` setting, else the recipe's, else h100-80gb. */
  device?: string;
  worldSize?: number;
  rank?: number;
  allRanks?: boolean;
  iterations?: number;
}

export interface TraceError {
  message: string;
  /** ScriptError, DataDependentError, MemlensError, Timeout, Crash, MissingTorch... */
  kind: string;
  file?: string;
  /** 1-based, as in tracebacks */
  line?: number;
  traceback?: string;
}

export interface TraceResult {
  targetId: string;
  status: TraceStatus;
  durationS: number;
  snapshot?: SnapshotInfo;
  error?: TraceError;
}

export interface CancelTraceParams {
  targetId: string;
}

export interface CancelTraceResult {
  cancelled: boolean;
}

export interface OpenReportParams {
  targetId?: string;
  /** A snapshot path; default: the target's newest. */
  snapshot?: string;
  /** Ask the client to show the snapshot (window/showDocument); default true. */
  show?: boolean;
}

export interface OpenReportResult {
  snapshot: SnapshotInfo | null;
}

export interface TargetsParams {
  /** Only the targets defined in this document. */
  uri?: string;
}

export interface TargetsResult {
  targets: Target[];
}

export interface DocumentParams {
  uri: string;
}

// eslint-disable-next-line @typescript-eslint/no-empty-interface
export interface EmptyParams {}

export interface Annotation {
  /** 0-based, in the document as it is now. */
  line: number;
  /** A traced module class, a line constructing submodules, a hot line. */
  kind: AnnotationKind;
  /** The module group (h.*.attn) or file:line. */
  label: string;
  /** What an inlay hint shows, e.g. "≈ 7.4 GiB · 6.1 GiB act ×32". */
  text: string;
  /** Bytes alive at the peak that this annotation accounts for. */
  bytes: number;
  /** bytes / peak bytes, 0..1 (the breakdown: textDocument/hover, on request) */
  share: number;
  stale: boolean;
}

export interface AnnotationsParams {
  uri: string;
  version: number | null;
  /** The document changed since the snapshot was taken. */
  stale: boolean;
  /** null: no snapshot covers this document. */
  snapshot: SnapshotInfo | null;
  /** The snapshot is the one Choose Trace chose (else: the newest covering the document). */
  chosen: boolean;
  annotations: Annotation[];
}

export interface SnapshotsResult {
  snapshots: SnapshotInfo[];
}

export interface DocumentTracesParams {
  /** Absent: every snapshot of the workspace. */
  uri?: string;
}

export interface DocumentTracesResult {
  /** The snapshots covering the document, newest first. */
  traces: SnapshotInfo[];
  /** The path of the one its annotations come from. */
  shown: string | null;
  /** The path of the snapshot Choose Trace chose, if any. */
  chosen: string | null;
}

export interface ChooseTraceParams {
  /** A snapshot's path (its target's newest follows); null: the newest. */
  snapshot?: string | null;
}

export interface ChooseTraceResult {
  chosen: SnapshotInfo | null;
}

export interface RunningTrace {
  targetId: string;
  pid: number;
}

export interface ServerInfo {
  pid: number;
  version: string;
  python: string;
  /** Must stay false: torch lives in the worker. */
  torchImported: boolean;
  /** The workers running: traces and searches (memlens.fit). */
  tracing: RunningTrace[];
}

export interface TraceStartedParams {
  targetId: string;
  target: Target;
  pid: number;
  command: string[];
}

export interface FitParams {
  /** A Target.id (a script, launch configuration or torchrun line), or: */
  targetId?: string;
  /** a target given in full, as for memlens.trace */
  target?: Target;
  /** `memlens fit` options of the space, e.g. ["--micro-batch", "1,2,4", "--axis",
   * "micro-batch=--batch-size"]; they win over [tool.memlens.fit], axis by axis. */
  space?: string[];
  /** Default: the `memlens.device` setting, else the recipe's, else h100-80gb. */
  device?: string;
  iterations?: number;
  /** The frontier's order; default: the config's, else "peak". */
  sort?: FitSort;
  /** Traces at a time; default 1 (the editor's machine is the user's). */
  jobs?: number;
}

export interface FitSpaceParams {
  /** The space as seen from this target's working directory. */
  targetId?: string;
  target?: Target;
}

export interface ScriptFlag {
  /** "--batch-size": an integer flag of the script's argparse. */
  flag: string;
  default: number | null;
  help: string;
  /** The built-in axis it is ("micro-batch", "seq"), else null. */
  axis: string | null;
  /** The `memlens fit` options making it an axis, e.g. ["--arg", "--n=1,2,4"]. */
  space: string[];
}

export interface FitSpaceResult {
  /** "…/pyproject.toml [tool.memlens.fit]"; null: no such table. */
  source: string | null;
  /** The table's keys (its axes and options), sorted. */
  keys: string[];
  /** The script's own integer flags, offered as axes. */
  flags: ScriptFlag[];
}

export interface FitAxis {
  name: string;
  /** In memory order where the axis has one. */
  values: string[];
  /** Where the value goes: "--batch-size", "env SEQ", "world size". */
  target: string;
  /** up | down | none: how memory moves as the value grows. */
  direction: string;
}

export interface FitRow {
  /** "gpus=2,micro-batch=4" */
  key: string;
  /** One per axis, in FitReport.axes' order. */
  values: string[];
  gpus: number;
  /** null: not traced (the search was interrupted). */
  verdict: FitVerdict | null;
  /** traced | resumed | pruned | implied | not traced */
  source: string;
  /** Why it fits or not, one line. */
  reason: string;
  /** The point that settled it without a trace. */
  by: string | null;
  /** The rank of least headroom. */
  worstRank: number | null;
  /** Allocated peak on the worst rank. */
  peakBytes: number | null;
  /** The caching allocator's reserved peak there. */
  reservedPeakBytes: number | null;
  /** The card less reserved and outside-allocator memory. */
  headroomBytes: number | null;
  ranksTraced: number | null;
  /** The point's snapshot (path), when traced. */
  snapshot: string | null;
}

export interface FitCounts {
  points: number;
  traced: number;
  resumed: number;
  pruned: number;
  implied: number;
  notTraced: number;
  fits: number;
  oom: number;
  errors: number;
}

export interface FitReport {
  target: string;
  device: string;
  deviceTotalBytes: number;
  sort: FitSort;
  axes: FitAxis[];
  counts: FitCounts;
  interrupted: boolean;
  /** The points that fit, sorted by `sort` as `memlens fit` sorts them. */
  frontier: FitRow[];
  /** The others, in the space's order, each with its reason. */
  excluded: FitRow[];
  /** The run folder (fit.json, every point's snapshot): the same search resumes. */
  runDir: string;
  /** The run folder's page of peaks. */
  html: string;
}

export interface FitResult {
  targetId: string;
  status: TraceStatus;
  durationS: number;
  fit?: FitReport;
  error?: TraceError;
}

/** The `memlens` settings section as the server reads it (initializationOptions.settings or
 * workspace/configuration). The extension's own settings are mapped onto it: src/config.ts. */
export interface Settings {
  /** Absent: the recipe's or launch configuration's device, else "h100-80gb". */
  device?: string;
  /** "70GiB" or bytes; default: the device's total memory. */
  budget?: string | number | null;
  /** Default: the recipe's, else 2. */
  iterations?: number | null;
  /** Default 300. */
  traceTimeout?: number;
  /** The worker's address-space limit; 0: twice the host's memory; -1: none. */
  memoryLimitMB?: number;
  /** Default false. */
  traceOnSave?: boolean;
  /** Hot lines annotated per file; default 5. */
  hotLines?: number;
  /** Default true. */
  inlayHints?: boolean;
  /** The worker's interpreter; default the server's. */
  python?: string | null;
}

export type MethodKind = 'command' | 'request' | 'notification';

export interface MethodDeclaration {
  kind: MethodKind;
  params: string;
  result?: string;
}

/** Every custom method with the names of its payload types, as protocol.py's METHODS. */
export const METHODS: Readonly<Record<string, MethodDeclaration>> = {
  [CMD_TRACE]: { kind: 'command', params: 'TraceParams', result: 'TraceResult' },
  [CMD_CANCEL_TRACE]: { kind: 'command', params: 'CancelTraceParams', result: 'CancelTraceResult' },
  [CMD_OPEN_REPORT]: { kind: 'command', params: 'OpenReportParams', result: 'OpenReportResult' },
  [REQ_TARGETS]: { kind: 'request', params: 'TargetsParams', result: 'TargetsResult' },
  [REQ_DOCUMENT_ANNOTATIONS]: { kind: 'request', params: 'DocumentParams', result: 'AnnotationsParams' },
  [REQ_SNAPSHOTS]: { kind: 'request', params: 'EmptyParams', result: 'SnapshotsResult' },
  [REQ_SERVER_INFO]: { kind: 'request', params: 'EmptyParams', result: 'ServerInfo' },
  [CMD_FIT]: { kind: 'command', params: 'FitParams', result: 'FitResult' },
  [REQ_FIT_SPACE]: { kind: 'request', params: 'FitSpaceParams', result: 'FitSpaceResult' },
  [REQ_DOCUMENT_TRACES]: { kind: 'request', params: 'DocumentTracesParams', result: 'DocumentTracesResult' },
  [CMD_CHOOSE_TRACE]: { kind: 'command', params: 'ChooseTraceParams', result: 'ChooseTraceResult' },
  [NOTIFY_ANNOTATIONS]: { kind: 'notification', params: 'AnnotationsParams' },
  [NOTIFY_TRACE_STARTED]: { kind: 'notification', params: 'TraceStartedParams' },
  [NOTIFY_TRACE_FINISHED]: { kind: 'notification', params: 'TraceResult' },
  [NOTIFY_SNAPSHOTS_CHANGED]: { kind: 'notification', params: 'SnapshotsResult' },
};
