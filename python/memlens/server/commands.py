"""What `memlens.trace` means on the LSP side: resolving the target, `$/progress` with a cancel
button, `$/cancelRequest`, and turning the worker's result into a TraceResult, diagnostics and
fresh annotations. Mixed into MemlensServer (server.py), which owns the state."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from lsprotocol import types as lsp
from pygls import uris

from ..devices import get_device  # a table, no torch
from ..errors import MemlensError
from ..units import format_bytes
from . import protocol as P
from .diagnostics import error_diagnostic
from .output_log import output_log_of
from .digest import normalize_path
from .targets import TargetInfo, document_targets
from .tracing import RunningTrace, TraceRequest, explain_failure
from .worker import WorkerResult, python_executable


class TraceCommands:
    """Trace handling for MemlensServer (uses its settings, targets, index and diagnostics)."""

    def on_cancel_request(self, msg_id: Any) -> None:
        run = self.runner.by_msg_id(msg_id)
        if run is not None:
            self.log(f"cancelling the trace of {run.request.target.name}")
            run.stop("cancelled")

    def on_progress_cancel(self, token: Any) -> None:
        run = self.runner.by_token(token)
        if run is not None:
            self.log(f"cancelling the trace of {run.request.target.name}")
            run.stop("cancelled")

    # TraceRunner hooks
    def running_changed(self, run: RunningTrace) -> None:
        """A trace was registered or its worker ended: the target's CodeLens says "Tracing…"
        exactly while it runs, not until the snapshot has been read."""
        self.refresh_code_lenses()

    def spawning(self, run: RunningTrace) -> None:
        """The worker is about to read the sources: keep them as it will see them, for placing
        its snapshot's lines in text edited since (traced.py)."""
        t = run.request.target
        files = {state.path for state in self.docs.values()}
        files.update(normalize_path(f) for f in (t.path, t.program) if f)
        self.traced.capture(run.snapshot, files)

    async def begin_progress(self, run: RunningTrace) -> None:
        if not self._client_can("window", "work_done_progress"):
            return
        token = f"memlens-trace-{uuid.uuid4().hex[:12]}"
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(token), 10)
        except Exception as e:
            self.log(f"no progress reporting: {e}", lsp.MessageType.Log)
            return
        run.token = token
        self.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(
            title=f"Tracing {run.request.target.name}", cancellable=True, message="starting",
            percentage=0))

    def report_progress(self, run: RunningTrace, message: str, percentage: int | None) -> None:
        if run.token is not None:
            self.work_done_progress.report(run.token, lsp.WorkDoneProgressReport(
                message=message, percentage=percentage, cancellable=True))

    def end_progress(self, run: RunningTrace, message: str) -> None:
        if run.token is not None:
            self.work_done_progress.end(run.token, lsp.WorkDoneProgressEnd(message=message))
            self.work_done_progress.tokens.pop(run.token, None)

    def worker_output(self, run: RunningTrace, line: str) -> None:
        """What the worker prints (the script's output, the CLI's tables): the log, quietly,
        within output_log.py's limits (all of it in a file)."""
        name = run.request.target.name
        output_log_of(run, lambda text: self.log(f"[{name}] {text}", lsp.MessageType.Log)
                      ).write(line)

    def started(self, run: RunningTrace, argv: list[str]) -> None:
        t = run.request.target
        self.log(f"tracing {t.name}: {' '.join(argv)} (pid {run.worker.pid})")
        self.protocol.notify(P.NOTIFY_TRACE_STARTED, {
            "targetId": t.id, "target": self.target_json(t), "pid": run.worker.pid,
            "command": argv})

    async def request_from(self, params: dict[str, Any]) -> TraceRequest:
        t = None
        if params.get("targetId"):
            tid = str(params["targetId"])
            t = self.find_target(tid)
            if t is None:  # the workspace scan may be under way (wait for it) ...
                await self.scan()
                t = self.find_target(tid)
            if t is None:  # ... or the file is new since the last one
                await self.scan(force=True)
                t = self.find_target(tid)
        elif isinstance(params.get("target"), dict):
            t = self.target_from_json(params["target"])
        if t is None:
            known = ", ".join(x.id for x in self.all_targets()[:20]) or "none found"
            what = params.get("targetId") or params.get("target")
            raise MemlensError(f"unknown trace target {what!r}; known targets: {known}")
        ints = {}
        for key in ("iterations", "worldSize", "rank"):
            v = params.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise MemlensError(f"{key} must be a non-negative integer, got {v!r}")
            ints[key] = v
        device = get_device(str(params.get("device") or self.settings.device)).name  # the table
        return TraceRequest(t, device, ints["iterations"] or self.settings.iterations,
                            ints["worldSize"], ints["rank"], bool(params.get("allRanks", False)))

    def target_from_json(self, raw: dict[str, Any]) -> TargetInfo | None:
        if raw.get("id"):
            found = self.find_target(str(raw["id"]))
            if found:
                return found
        path = uris.to_fs_path(str(raw.get("uri", ""))) if raw.get("uri") else raw.get("path")
        if not path:
            return None
        path = normalize_path(path)
        text = self.docs_text(path)
        if text is None:
            return None
        try:
            found = document_targets(path, text, self.folders, self.recipes)
        except MemlensError:
            return None
        for t in found:
            if t.kind == raw.get("kind") and (raw.get("symbol") in (None, t.symbol)) and \
                    (raw.get("name") in (None, t.name) or t.kind in ("model", "script")):
                return t
        return None

    async def trace(self, params: dict[str, Any]) -> dict[str, Any]:
        req = await self.request_from(params)
        self.last_requests[req.target.id] = req
        run, result, snapshot = await self.runner.run(req, self.protocol.msg_id)
        return await self.finish_trace(run, result, snapshot)

    async def finish_trace(self, run: RunningTrace, result: WorkerResult | None,
                           snapshot: str) -> dict[str, Any]:
        t = run.request.target
        out: dict[str, Any] = {"targetId": t.id,
                               "durationS": round(result.duration_s, 3) if result else 0.0}
        if result is None:
            out["status"] = run.cancelled_before_start or "cancelled"
        elif result.status == "ok":
            # The worker's final line carries the snapshot's digest: no process reads it again.
            digest = (result.output or {}).get("digest")
            added = isinstance(digest, dict) and self.index.add(snapshot, digest) is not None
            try:
                await self.refresh_index(changed=added)
            except Exception as exc:  # noqa: BLE001 - reported as the trace's failure below
                self.log(f"reading snapshots failed: {type(exc).__name__}: {exc}",
                         lsp.MessageType.Error)
            e = self.index.by_path(snapshot)
            if e is not None and e.digest is not None:
                out["status"] = "ok"
                out["snapshot"] = self.snapshot_info(e, t)
                self.diagnostics.clear(f"error:{t.id}")
            else:
                why = e.error if e is not None else f"{snapshot} was not written"
                result = WorkerResult("failed", result.returncode, {"error": {
                    "kind": "SnapshotError", "message": f"The trace ran but its snapshot is "
                                                        f"unusable: {why}"}})
        if result is not None and result.status in ("failed", "timeout"):
            python = python_executable(self.settings.python or t.python)
            error = explain_failure(result, run.request, self.settings, python)
            out["status"] = result.status
            out["error"] = error
            uri, diag = error_diagnostic(t, error, self.read_lines)
            self.diagnostics.set(f"error:{t.id}", uri, diag)
            self.log(f"trace of {t.name} {result.status}: {error['message']}",
                     lsp.MessageType.Warning)
        elif result is not None and result.status in ("cancelled", "replaced"):
            out["status"] = result.status
        self.forget_unused_sources()
        message = {"ok": "done", "failed": "failed", "timeout": "timed out",
                   "cancelled": "cancelled", "replaced": "replaced by a newer trace"}
        self.end_progress(run, message.get(out["status"], out["status"]))
        if out["status"] == "ok":
            self.log(f"trace of {t.name} done: peak "
                     f"{format_bytes(out['snapshot']['peakBytes'])}, {snapshot}")
        self.protocol.notify(P.NOTIFY_TRACE_FINISHED, out)
        self.refresh_client_views()
        return out

    def forget_unused_sources(self) -> None:
        """Drop the sources kept for snapshots no longer in use (superseded, or never written
        because the trace failed); those of traces still running stay."""
        self.traced.retain({e.path for e in self.index.entries.values()}
                           | {r.snapshot for r in self.runner.running.values()})

    def trace_on_save(self, path: str) -> None:
        if not self.settings.traceOnSave:
            return
        for t in self.all_targets():
            e = self.entry_for(t)
            related = e is not None and (t.path == path or path in e.files)
            if related and t.id not in self.runner.running:
                req = self.last_requests.get(t.id) or TraceRequest(t, self.settings.device,
                                                                   self.settings.iterations)
                req.target = t
                self.spawn(self._trace_in_background(req))

    async def _trace_in_background(self, req: TraceRequest) -> None:
        run, result, snapshot = await self.runner.run(req, None)
        await self.finish_trace(run, result, snapshot)
