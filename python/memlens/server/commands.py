"""What `memlens.trace` means on the LSP side: resolving the target, `$/progress` with a cancel
button, `$/cancelRequest`, and turning the worker's result into a TraceResult, diagnostics and
fresh annotations. server.py makes one TraceCommands and one LspTraceHooks (the TraceRunner's
LSP side) and hands each what it uses, nothing more."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine, Protocol

from lsprotocol import types as lsp
from pygls import uris

from ..devices import get_device  # a table, no torch
from ..errors import MemlensError
from ..units import format_bytes
from . import payloads
from . import protocol as P
from .client import LspClient
from .diagnostics import DiagnosticStore
from ..snapshot.digest import normalize_path
from .index import SnapshotEntry, SnapshotIndex
from .output_log import output_log_of
from .settings import Settings
from .targets import TargetInfo
from .traced import TracedTexts
from .tracing import RunningTrace, TraceRequest, TraceRunner, explain_failure
from .worker import WorkerResult, python_executable

FINISHED = {"ok": "done", "failed": "failed", "timeout": "timed out", "cancelled": "cancelled",
            "replaced": "replaced by a newer trace"}  # what the progress says at the end


class TraceWorkspace(Protocol):
    """What a trace needs of the server's state: its targets, documents and snapshots (the
    MemlensServer of server.py)."""

    def find_target(self, target_id: str) -> TargetInfo | None: ...

    def all_targets(self) -> list[TargetInfo]: ...

    async def scan(self, force: bool = False) -> None:
        """Look for targets in the workspace again (unless a recent scan is fresh enough)."""

    def targets_in(self, path: str) -> list[TargetInfo]:
        """The targets a file defines, read as the editor has it (else from disk)."""

    def open_paths(self) -> set[str]:
        """The normalized paths of the open documents."""

    def read_lines(self, path: str) -> list[str]: ...

    def entry_for(self, t: TargetInfo) -> SnapshotEntry | None:
        """The newest snapshot of a target."""

    def target_json(self, t: TargetInfo) -> P.Target: ...

    def snapshot_info(self, e: SnapshotEntry, t: TargetInfo | None = None
                      ) -> P.SnapshotInfo: ...

    async def refresh_index(self, changed: bool = False) -> None:
        """Read the snapshot folders again, and show what changed."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task: ...


class LspTraceHooks:
    """The LSP side of a running trace (tracing.TraceHooks): progress, the worker's output in
    the log, `memlens/traceStarted`, CodeLens that say "Tracing…"."""

    def __init__(self, client: LspClient, traced: TracedTexts, workspace: TraceWorkspace):
        self.client = client
        self.traced = traced
        self.workspace = workspace

    def running_changed(self, run: RunningTrace) -> None:
        """A trace was registered or its worker ended: the target's CodeLens says "Tracing…"
        exactly while it runs, not until the snapshot has been read."""
        self.client.refresh_code_lenses()

    def spawning(self, run: RunningTrace) -> None:
        """The worker is about to read the sources: keep them as it will see them, for placing
        its snapshot's lines in text edited since (traced.py)."""
        t = run.request.target
        files = self.workspace.open_paths()
        files.update(normalize_path(f) for f in (t.path, t.program) if f)
        self.traced.capture(run.snapshot, files)

    async def begin_progress(self, run: RunningTrace) -> None:
        token = await self.client.begin_progress(f"Tracing {run.request.target.name}")
        if token is not None:
            run.token = token

    def report_progress(self, run: RunningTrace, message: str, percentage: int | None) -> None:
        if run.token is not None:
            self.client.report_progress(run.token, message, percentage)

    def worker_output(self, run: RunningTrace, line: str) -> None:
        """What the worker prints (the script's output, the CLI's tables): the log, quietly,
        within output_log.py's limits (all of it in a file)."""
        name = run.request.target.name
        output_log_of(run, lambda text: self.client.log(f"[{name}] {text}",
                                                        lsp.MessageType.Log)).write(line)

    def started(self, run: RunningTrace, argv: list[str]) -> None:
        t, pid = run.request.target, run.worker.pid if run.worker else None
        self.client.log(f"tracing {t.name}: {' '.join(argv)} (pid {pid})")
        self.client.notify(P.NOTIFY_TRACE_STARTED, payloads.trace_started(
            self.workspace.target_json(t), pid, argv))

    def log(self, message: str) -> None:
        self.client.log(message)


class TraceCommands:
    """`memlens.trace`, cancelling, and traces on save."""

    def __init__(self, runner: TraceRunner, index: SnapshotIndex, settings: Callable[[], Settings],
                 client: LspClient, diagnostics: DiagnosticStore, traced: TracedTexts,
                 workspace: TraceWorkspace):
        self.runner = runner
        self.index = index
        self.settings = settings
        self.client = client
        self.diagnostics = diagnostics
        self.traced = traced
        self.workspace = workspace
        self.last_requests: dict[str, TraceRequest] = {}  # by target id: what on-save repeats

    def on_cancel_request(self, msg_id: Any) -> None:
        run = self.runner.running.by_msg_id(msg_id)
        if run is not None:
            run.unanswered = True  # the request is answered "cancelled" at once, not by this
        self._cancel(run)

    def on_progress_cancel(self, token: Any) -> None:
        self._cancel(self.runner.running.by_token(token))

    def _cancel(self, run: RunningTrace | None) -> None:
        if run is not None:
            self.client.log(f"cancelling the trace of {run.request.target.name}")
            run.stop("cancelled")

    async def request_from(self, params: dict[str, Any]) -> TraceRequest:
        ws, settings = self.workspace, self.settings()
        t = None
        if params.get("targetId"):
            tid = str(params["targetId"])
            t = ws.find_target(tid)
            if t is None:  # the workspace scan may be under way (wait for it) ...
                await ws.scan()
                t = ws.find_target(tid)
            if t is None:  # ... or the file is new since the last one
                await ws.scan(force=True)
                t = ws.find_target(tid)
        elif isinstance(params.get("target"), dict):
            t = self.target_from_json(params["target"])
        if t is None:
            known = ", ".join(x.id for x in ws.all_targets()[:20]) or "none found"
            what = params.get("targetId") or params.get("target")
            raise MemlensError(f"unknown trace target {what!r}; known targets: {known}")
        ints = {}
        for key in ("iterations", "worldSize", "rank"):
            v = params.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise MemlensError(f"{key} must be a non-negative integer, got {v!r}")
            ints[key] = v
        asked = params.get("device") or settings.device  # else the recipe's, as on the CLI
        device = get_device(str(asked)).name if asked else None  # a name of the table
        return TraceRequest(t, device, ints["iterations"] or settings.iterations,
                            ints["worldSize"], ints["rank"], bool(params.get("allRanks", False)))

    def target_from_json(self, raw: dict[str, Any]) -> TargetInfo | None:
        if raw.get("id"):
            found = self.workspace.find_target(str(raw["id"]))
            if found:
                return found
        path = uris.to_fs_path(str(raw.get("uri", ""))) if raw.get("uri") else raw.get("path")
        if not path:
            return None
        for t in self.workspace.targets_in(normalize_path(path)):
            if t.kind == raw.get("kind") and (raw.get("symbol") in (None, t.symbol)) and \
                    (raw.get("name") in (None, t.name) or t.kind in ("model", "script")):
                return t
        return None

    async def trace(self, params: dict[str, Any], msg_id: Any) -> P.TraceResult:
        """The `memlens.trace` command (request `msg_id`), answered when the trace ends."""
        req = await self.request_from(params)
        self.last_requests[req.target.id] = req
        run, result, snapshot = await self.runner.run(req, msg_id)
        return await self.finish_trace(run, result, snapshot)

    async def finish_trace(self, run: RunningTrace, result: WorkerResult | None,
                           snapshot: str) -> P.TraceResult:
        t = run.request.target
        out: P.TraceResult = {"targetId": t.id, "status": "cancelled",
                              "durationS": round(result.duration_s, 3) if result else 0.0}
        if result is None:
            out["status"] = run.stopped_before_start or "cancelled"
        elif result.status == "ok":
            # The worker's final line carries the snapshot's digest: no process reads it again.
            digest = (result.output or {}).get("digest")
            added = isinstance(digest, dict) and self.index.add(snapshot, digest) is not None
            try:
                await self.workspace.refresh_index(changed=added)
            except Exception as exc:  # noqa: BLE001 - reported as the trace's failure below
                self.client.log(f"reading snapshots failed: {type(exc).__name__}: {exc}",
                                lsp.MessageType.Error)
            e = self.index.by_path(snapshot)
            if e is not None and e.digest is not None:
                out["status"] = "ok"
                out["snapshot"] = self.workspace.snapshot_info(e, t)
                self.diagnostics.clear(f"error:{t.id}")
            else:
                why = e.error if e is not None else f"{snapshot} was not written"
                result = WorkerResult("failed", result.returncode, {"error": {
                    "kind": "SnapshotError", "message": f"The trace ran but its snapshot is "
                                                        f"unusable: {why}"}})
        if result is not None and result.status in ("failed", "timeout"):
            settings = self.settings()
            python = python_executable(settings.python or t.python)
            error = explain_failure(result, run.request, settings, python)
            out["status"] = result.status
            out["error"] = error
            uri, diag = payloads.error_diagnostic(t, error, self.workspace.read_lines)
            self.diagnostics.set(f"error:{t.id}", uri, diag)
            self.client.log(f"trace of {t.name} {result.status}: {error['message']}",
                            lsp.MessageType.Warning)
        elif result is not None and result.status in ("cancelled", "replaced"):
            out["status"] = result.status
        self.forget_unused_sources()
        if run.token is not None:
            self.client.end_progress(run.token, FINISHED.get(out["status"], out["status"]))
        if out["status"] == "ok":
            self.client.log(f"trace of {t.name} done: peak "
                            f"{format_bytes(out['snapshot']['peakBytes'])}, {snapshot}")
        if run.msg_id is None or run.unanswered:  # no reply carries it: the one message
            self.client.notify(P.NOTIFY_TRACE_FINISHED, out)
        self.client.refresh_views()
        return out

    def forget_unused_sources(self) -> None:
        """Drop the sources kept for snapshots no longer in use (superseded, or never written
        because the trace failed); those of traces still running stay."""
        self.traced.retain({e.path for e in self.index.entries.values()}
                           | {r.snapshot for r in self.runner.running.values()})

    def trace_on_save(self, path: str) -> None:
        settings = self.settings()
        if not settings.traceOnSave:
            return
        for t in self.workspace.all_targets():
            e = self.workspace.entry_for(t)
            related = e is not None and (t.path == path or path in e.files)
            if related and t.id not in self.runner.running:
                req = self.last_requests.get(t.id) or TraceRequest(t, settings.device,
                                                                   settings.iterations)
                req.target = t
                self.workspace.spawn(self._trace_in_background(req))

    async def _trace_in_background(self, req: TraceRequest) -> None:
        run, result, snapshot = await self.runner.run(req, None)
        await self.finish_trace(run, result, snapshot)
