"""Every method of the memlens language server beyond standard LSP, declared once.

Standard LSP carries most of it (hover, inlay hints, CodeLens, diagnostics, `$/progress`,
`workspace/executeCommand`, cancellation); what LSP lacks is declared here, with the shape of
each payload as a TypedDict. `common/protocol.ts` mirrors this module; a test compares the two
through `python -m memlens.server.protocol` (this module as JSON).

Conventions: payload keys are camelCase; sizes are integers of bytes; lines are 0-based (LSP);
`uri` is a `file://` URI, `path` a file system path.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from typing import Any, Literal, TypedDict, Union

# -- commands (workspace/executeCommand; arguments: one object) ------------------------------
CMD_TRACE = "memlens.trace"  # TraceParams -> TraceResult (when the trace ends)
CMD_CANCEL_TRACE = "memlens.cancelTrace"  # CancelTraceParams -> CancelTraceResult
CMD_OPEN_REPORT = "memlens.openReport"  # OpenReportParams -> OpenReportResult
CMD_FIT = "memlens.fit"  # FitParams -> FitResult (when the search ends)
CMD_CHOOSE_TRACE = "memlens.chooseTrace"  # ChooseTraceParams -> ChooseTraceResult

# -- requests, client -> server ---------------------------------------------------------------
REQ_TARGETS = "memlens/targets"  # TargetsParams -> TargetsResult
REQ_DOCUMENT_ANNOTATIONS = "memlens/documentAnnotations"  # DocumentParams -> AnnotationsParams
REQ_SNAPSHOTS = "memlens/snapshots"  # EmptyParams -> SnapshotsResult
REQ_SERVER_INFO = "memlens/serverInfo"  # EmptyParams -> ServerInfo
REQ_FIT_SPACE = "memlens/fitSpace"  # FitSpaceParams -> FitSpaceResult
REQ_DOCUMENT_TRACES = "memlens/documentTraces"  # DocumentTracesParams -> DocumentTracesResult

# -- notifications, server -> client ----------------------------------------------------------
NOTIFY_ANNOTATIONS = "memlens/annotations"  # AnnotationsParams
NOTIFY_TRACE_STARTED = "memlens/traceStarted"  # TraceStartedParams
NOTIFY_TRACE_FINISHED = "memlens/traceFinished"  # TraceResult
NOTIFY_SNAPSHOTS_CHANGED = "memlens/snapshotsChanged"  # SnapshotsResult

SETTINGS_SECTION = "memlens"
DIAGNOSTIC_SOURCE = "memlens"

TargetKind = Literal["model", "script", "launch", "torchrun"]
TraceStatus = Literal["ok", "failed", "cancelled", "timeout", "replaced"]
AnnotationKind = Literal["class", "construct", "line"]
FitVerdict = Literal["fits", "oom", "error"]
FitSort = Literal["gpus", "micro-batch", "recompute", "peak"]


class Position(TypedDict):
    line: int
    character: int


class Range(TypedDict):
    start: Position
    end: Position


class SnapshotInfo(TypedDict):
    path: str
    uri: str
    targetId: Union[str, None]  # the target it belongs to, when the server knows it
    targetName: str
    kind: str  # meta.target.kind
    created: str  # ISO 8601, UTC
    peakBytes: int
    peakPhase: Union[str, None]
    device: str  # meta.device.name
    deviceTotalBytes: int
    budgetBytes: int  # the budget diagnostics compare the peak with
    # The snapshot's verdict: the device's memory less (reserved peak + outside the allocator),
    # as `memlens show` and the panel say it; None for a snapshot without one.
    fits: Union[bool, None]
    headroomBytes: Union[int, None]
    rank: int
    worldSize: int


class _TargetRequired(TypedDict):
    id: str
    kind: TargetKind
    name: str
    uri: str  # the file that defines it: model file, script, launch.json, shell script
    range: Range  # where its CodeLens and diagnostics go
    detail: str  # one line for pickers
    tracing: bool  # a trace of it is running


class Target(_TargetRequired, total=False):
    symbol: str  # model: the class or factory
    program: str  # script, launch, torchrun: the training script (absolute path)
    module: str  # launch, torchrun: `-m package.module` instead of a program
    args: list[str]
    cwd: str
    worldSize: int  # torchrun / launch configurations that run torchrun
    snapshot: SnapshotInfo  # the newest snapshot of this target


class TraceParams(TypedDict, total=False):
    targetId: str  # a Target.id from memlens/targets, or:
    target: Target  # a target given in full (kind and uri, plus symbol for a model)
    device: str  # default: the `memlens.device` setting
    worldSize: int
    rank: int
    allRanks: bool
    iterations: int


class _TraceErrorRequired(TypedDict):
    message: str
    kind: str  # ScriptError, DataDependentError, MemlensError, Timeout, Crash, MissingTorch...


class TraceError(_TraceErrorRequired, total=False):
    file: str
    line: int  # 1-based, as in tracebacks
    traceback: str


class _TraceResultRequired(TypedDict):
    targetId: str
    status: TraceStatus
    durationS: float


class TraceResult(_TraceResultRequired, total=False):
    snapshot: SnapshotInfo
    error: TraceError


class CancelTraceParams(TypedDict):
    targetId: str


class CancelTraceResult(TypedDict):
    cancelled: bool


class OpenReportParams(TypedDict, total=False):
    targetId: str
    snapshot: str  # a snapshot path; default: the target's newest
    show: bool  # ask the client to show the snapshot (window/showDocument); default true


class OpenReportResult(TypedDict):
    snapshot: Union[SnapshotInfo, None]


class TargetsParams(TypedDict, total=False):
    uri: str  # only the targets defined in this document


class TargetsResult(TypedDict):
    targets: list[Target]


class DocumentParams(TypedDict):
    uri: str


class EmptyParams(TypedDict):
    pass


class Annotation(TypedDict):
    line: int  # 0-based, in the document as it is now
    kind: AnnotationKind  # a traced module class, a line constructing submodules, a hot line
    label: str  # the module group (h.*.attn) or file:line
    text: str  # what an inlay hint shows, e.g. "≈ 7.4 GiB · 6.1 GiB act ×32"
    bytes: int  # bytes alive at the peak that this annotation accounts for
    share: float  # bytes / peak bytes, 0..1 (the breakdown: textDocument/hover, on request)
    stale: bool


class AnnotationsParams(TypedDict):
    uri: str
    version: Union[int, None]
    stale: bool  # the document changed since the snapshot was taken
    snapshot: Union[SnapshotInfo, None]  # None: no snapshot covers this document
    chosen: bool  # the snapshot is the one Choose Trace chose (else: the newest covering it)
    annotations: list[Annotation]


class SnapshotsResult(TypedDict):
    snapshots: list[SnapshotInfo]


class DocumentTracesParams(TypedDict, total=False):
    uri: str  # absent: every snapshot of the workspace


class DocumentTracesResult(TypedDict):
    traces: list[SnapshotInfo]  # the snapshots covering the document, newest first
    shown: Union[str, None]  # the path of the one its annotations come from
    chosen: Union[str, None]  # the path of the snapshot Choose Trace chose, if any


class ChooseTraceParams(TypedDict, total=False):
    snapshot: Union[str, None]  # a snapshot's path (its target's newest follows); None: newest


class ChooseTraceResult(TypedDict):
    chosen: Union[SnapshotInfo, None]


class RunningTrace(TypedDict):
    targetId: str
    pid: int


class ServerInfo(TypedDict):
    pid: int
    version: str
    python: str
    torchImported: bool  # must stay false: torch lives in the worker
    tracing: list[RunningTrace]  # the workers running: traces and searches (memlens.fit)


class TraceStartedParams(TypedDict):
    targetId: str
    target: Target
    pid: int
    command: list[str]


class FitParams(TypedDict, total=False):
    targetId: str  # a Target.id (a script, launch configuration or torchrun line), or:
    target: Target  # a target given in full, as for memlens.trace
    space: list[str]  # `memlens fit` options of the space, e.g. ["--micro-batch", "1,2,4",
    # "--axis", "micro-batch=--batch-size"]; they win over [tool.memlens.fit], axis by axis
    device: str  # default: the `memlens.device` setting
    iterations: int
    sort: FitSort  # the frontier's order; default: the config's, else "peak"
    jobs: int  # traces at a time; default 1 (the editor's machine is the user's)


class FitSpaceParams(TypedDict, total=False):
    targetId: str  # the space as seen from this target's working directory
    target: Target


class ScriptFlag(TypedDict):
    flag: str  # "--batch-size": an integer flag of the script's argparse
    default: Union[int, None]
    help: str
    axis: Union[str, None]  # the built-in axis it is ("micro-batch", "seq"), else None
    space: list[str]  # the `memlens fit` options making it an axis, e.g. ["--arg", "--n=1,2,4"]


class FitSpaceResult(TypedDict):
    source: Union[str, None]  # "…/pyproject.toml [tool.memlens.fit]"; None: no such table
    keys: list[str]  # the table's keys (its axes and options), sorted
    flags: list[ScriptFlag]  # the script's own integer flags, offered as axes


class FitAxis(TypedDict):
    name: str
    values: list[str]  # in memory order where the axis has one
    target: str  # where the value goes: "--batch-size", "env SEQ", "world size"
    direction: str  # up | down | none: how memory moves as the value grows


class FitRow(TypedDict):
    key: str  # "gpus=2,micro-batch=4"
    values: list[str]  # one per axis, in FitReport.axes' order
    gpus: int
    verdict: Union[FitVerdict, None]  # None: not traced (the search was interrupted)
    source: str  # traced | resumed | pruned | implied | not traced
    reason: str  # why it fits or not, one line
    by: Union[str, None]  # the point that settled it without a trace
    worstRank: Union[int, None]  # the rank of least headroom
    peakBytes: Union[int, None]  # allocated peak on the worst rank
    reservedPeakBytes: Union[int, None]  # the caching allocator's reserved peak there
    headroomBytes: Union[int, None]  # the card less reserved and outside-allocator memory
    ranksTraced: Union[int, None]
    snapshot: Union[str, None]  # the point's snapshot (path), when traced


class FitCounts(TypedDict):
    points: int
    traced: int
    resumed: int
    pruned: int
    implied: int
    notTraced: int
    fits: int
    oom: int
    errors: int


class FitReport(TypedDict):
    target: str
    device: str
    deviceTotalBytes: int
    sort: FitSort
    axes: list[FitAxis]
    counts: FitCounts
    interrupted: bool
    frontier: list[FitRow]  # the points that fit, sorted by `sort` as `memlens fit` sorts them
    excluded: list[FitRow]  # the others, in the space's order, each with its reason
    runDir: str  # the run folder (fit.json, every point's snapshot): the same search resumes
    html: str  # the run folder's page of peaks


class _FitResultRequired(TypedDict):
    targetId: str
    status: TraceStatus
    durationS: float


class FitResult(_FitResultRequired, total=False):
    fit: FitReport
    error: TraceError


class Settings(TypedDict, total=False):
    """The `memlens` settings section (initializationOptions.settings or
    workspace/configuration)."""

    device: str  # absent: the recipe's or launch configuration's device, else "h100-80gb"
    budget: Union[str, int, None]  # "70GiB" or bytes; default: the device's total memory
    iterations: Union[int, None]  # default: the recipe's, else 2
    traceTimeout: float  # default 300
    memoryLimitMB: int  # the worker's address-space limit; 0: twice the host's memory; -1: none
    traceOnSave: bool  # default false
    hotLines: int  # hot lines annotated per file; default 5
    inlayHints: bool  # default true
    python: Union[str, None]  # the worker's interpreter; default the server's


METHODS: dict[str, dict[str, Any]] = {
    CMD_TRACE: {"kind": "command", "params": "TraceParams", "result": "TraceResult"},
    CMD_CANCEL_TRACE: {"kind": "command", "params": "CancelTraceParams",
                       "result": "CancelTraceResult"},
    CMD_OPEN_REPORT: {"kind": "command", "params": "OpenReportParams",
                      "result": "OpenReportResult"},
    REQ_TARGETS: {"kind": "request", "params": "TargetsParams", "result": "TargetsResult"},
    REQ_DOCUMENT_ANNOTATIONS: {"kind": "request", "params": "DocumentParams",
                               "result": "AnnotationsParams"},
    REQ_SNAPSHOTS: {"kind": "request", "params": "EmptyParams", "result": "SnapshotsResult"},
    REQ_SERVER_INFO: {"kind": "request", "params": "EmptyParams", "result": "ServerInfo"},
    CMD_FIT: {"kind": "command", "params": "FitParams", "result": "FitResult"},
    REQ_FIT_SPACE: {"kind": "request", "params": "FitSpaceParams", "result": "FitSpaceResult"},
    REQ_DOCUMENT_TRACES: {"kind": "request", "params": "DocumentTracesParams",
                          "result": "DocumentTracesResult"},
    CMD_CHOOSE_TRACE: {"kind": "command", "params": "ChooseTraceParams",
                       "result": "ChooseTraceResult"},
    NOTIFY_ANNOTATIONS: {"kind": "notification", "params": "AnnotationsParams"},
    NOTIFY_TRACE_STARTED: {"kind": "notification", "params": "TraceStartedParams"},
    NOTIFY_TRACE_FINISHED: {"kind": "notification", "params": "TraceResult"},
    NOTIFY_SNAPSHOTS_CHANGED: {"kind": "notification", "params": "SnapshotsResult"},
}

TYPES = (Position, Range, SnapshotInfo, Target, TraceParams, TraceError, TraceResult,
         CancelTraceParams, CancelTraceResult, OpenReportParams, OpenReportResult,
         TargetsParams, TargetsResult, DocumentParams, EmptyParams, Annotation,
         AnnotationsParams, SnapshotsResult, DocumentTracesParams, DocumentTracesResult,
         ChooseTraceParams, ChooseTraceResult, RunningTrace, ServerInfo, TraceStartedParams,
         FitParams, FitSpaceParams, ScriptFlag, FitSpaceResult, FitAxis, FitRow, FitCounts, FitReport,
         FitResult, Settings)
ALIASES = {"TargetKind": TargetKind, "TraceStatus": TraceStatus,
           "AnnotationKind": AnnotationKind, "FitVerdict": FitVerdict, "FitSort": FitSort}


def _ts(tp: Any) -> str:
    """A TypeScript spelling of a Python annotation."""
    for name, alias in ALIASES.items():
        if tp == alias:
            return name
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_ts(a) for a in typing.get_args(tp))
    if origin is list:
        inner = _ts(typing.get_args(tp)[0])
        return f"({inner})[]" if " " in inner else f"{inner}[]"
    if tp is type(None):
        return "null"
    if tp in (int, float):
        return "number"
    if tp is str:
        return "string"
    if tp is bool:
        return "boolean"
    if isinstance(tp, type) and hasattr(tp, "__annotations__"):
        return tp.__name__
    raise TypeError(f"no TypeScript spelling for {tp!r}")


def describe() -> dict[str, Any]:
    """The protocol as data: method names with their payload types, and each type's fields."""
    out_types: dict[str, Any] = {name: " | ".join(json.dumps(x) for x in typing.get_args(a))
                                 for name, a in ALIASES.items()}
    for td in TYPES:
        hints = typing.get_type_hints(td)
        out_types[td.__name__] = {
            key: {"type": _ts(tp), "optional": key in td.__optional_keys__}
            for key, tp in hints.items()}
    return {"methods": METHODS, "types": out_types,
            "settingsSection": SETTINGS_SECTION, "diagnosticSource": DIAGNOSTIC_SOURCE}


if __name__ == "__main__":
    json.dump(describe(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
