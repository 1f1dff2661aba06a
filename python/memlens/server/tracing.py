"""Running traces: one worker per target at a time (a new request replaces the old one), each
cancellable, timed, reported as `$/progress`, and ending in a TraceResult.

What a finished trace means for documents (annotations, diagnostics) is the server's business;
this module only runs workers and explains their failures.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import signal
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from ..units import format_bytes
from .index import ensure_snapshot_dir
from .settings import Settings
from .targets import TargetInfo
from ..worker.protocol import snapshot_path, trace_command
from .jobs import Runs, WorkerRun, start
from .worker import Worker, WorkerResult, python_executable

_PHASE = re.compile(r"^(forward_backward|optimizer_step)_iter_(\d+)$")


@dataclass
class TraceRequest:
    target: TargetInfo
    device: str | None  # None: the recipe's, else the CLI's default
    iterations: int | None = None
    world_size: int | None = None
    rank: int | None = None
    all_ranks: bool = False


def _iteration_fraction(phase: str, iterations: int) -> float | None:
    if phase == "starting":
        return 0.0
    if phase == "setup_model_and_optimizer":
        return 0.05
    if phase == "building snapshot":
        return 0.95
    m = _PHASE.match(phase)
    if not m:
        return None
    step = 2 * int(m.group(2)) + (1 if m.group(1) == "optimizer_step" else 0)
    return 0.1 + 0.8 * min(1.0, step / max(1, 2 * iterations))


def progress_text(record: dict[str, Any]) -> str:
    phase = str(record.get("phase", ""))
    rank = record.get("rank")
    m = _PHASE.match(phase)
    what = phase
    if m:
        what = f"{'forward/backward' if m.group(1) == 'forward_backward' else 'optimizer step'}" \
               f", iteration {int(m.group(2)) + 1}"
    return (f"rank {rank} · " if rank is not None else "") + what


_TRACEBACK_FRAME = re.compile(r'^\s*File "(.+)", line (\d+)(?:, in (.+))?$')


def traceback_frames(text: str) -> list[tuple[str, int, str, str]]:
    """(file, line, function, code) of each frame of a formatted traceback."""
    out: list[tuple[str, int, str, str]] = []
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        m = _TRACEBACK_FRAME.match(ln)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not \
                _TRACEBACK_FRAME.match(lines[i + 1]) else ""
            out.append((m.group(1), int(m.group(2)), m.group(3) or "", code))
    return out


def explain_failure(result: WorkerResult, req: TraceRequest, settings: Settings,
                    python: str) -> dict[str, Any]:
    """A TraceError for a worker that did not produce a snapshot."""
    name = req.target.name
    if result.status == "timeout":
        return {"kind": "Timeout",
                "message": f"The trace of {name} ran past its time limit of "
                           f"{settings.traceTimeout:g} s and was stopped "
                           "(setting memlens.traceTimeout)."}
    tail = "\n".join(result.log)
    limit = settings.memory_limit_bytes()
    limit_text = f" (the worker's memory limit is {format_bytes(limit)}; setting " \
                 "memlens.memoryLimitMB)" if limit else ""
    err = result.error
    if err:
        out = {"kind": str(err.get("kind", "Error")), "message": str(err.get("message", ""))}
        if err.get("file"):
            out["file"] = str(err["file"])
            out["line"] = int(err.get("line") or 0)
        if err.get("traceback"):
            out["traceback"] = str(err["traceback"])
        if "MemoryError" in out["message"]:
            out["message"] += limit_text
        return out
    if re.search(r"No module named '?torch'?($|[^._\w])", tail):
        return {"kind": "MissingTorch",
                "message": f"PyTorch is not installed for {python}. Install torch in that "
                           "environment, or point the memlens.python setting at an "
                           "interpreter that has it.", "traceback": tail}
    missing = re.search(r"No module named '([\w.]+)'", tail)
    if missing:
        return {"kind": "MissingDependency",
                "message": f"The worker's Python ({python}) cannot run memlens: no module named "
                           f"{missing.group(1)!r}.", "traceback": tail}
    rc = result.returncode
    if "MemoryError" in tail or "std::bad_alloc" in tail:
        return {"kind": "OutOfMemory",
                "message": f"The trace worker ran out of memory{limit_text}.",
                "traceback": tail}
    last = next((ln.strip() for ln in reversed(result.log) if ln.strip()), "")
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = str(-rc)
        why = f"The trace worker was killed by {sig}"
        if sig == "SIGKILL":
            why += f" (out of memory?{limit_text})" if limit_text else " (out of memory?)"
        return {"kind": "Crash", "message": why + (f": {last}" if last else "."),
                "traceback": tail}
    return {"kind": "Crash",
            "message": f"The trace worker exited with status {rc}" + (f": {last}" if last else
                                                                         "."),
            "traceback": tail}


@dataclass
class RunningTrace(WorkerRun):
    request: TraceRequest
    snapshot: str = ""  # the path the worker is told to write
    started: float = field(default_factory=lambda: _dt.datetime.now().timestamp())


class TraceHooks(Protocol):
    """The LSP side of a trace, which the server supplies to the TraceRunner (commands.py's
    LspTraceHooks)."""

    def running_changed(self, run: RunningTrace) -> None:
        """A trace was registered or has ended."""

    def begin_progress(self, run: RunningTrace) -> Awaitable[None]: ...

    def report_progress(self, run: RunningTrace, message: str,
                        percentage: int | None) -> None: ...

    def spawning(self, run: RunningTrace) -> None:
        """The worker is about to start."""

    def started(self, run: RunningTrace, argv: list[str]) -> None: ...

    def worker_output(self, run: RunningTrace, line: str) -> None: ...

    def log(self, message: str) -> None: ...


class TraceRunner:
    """Runs workers; the server supplies the LSP side through `hooks` (TraceHooks)."""

    def __init__(self, hooks: TraceHooks, settings: Callable[[], Settings]):
        self.hooks = hooks
        self.settings = settings
        self.running: Runs[RunningTrace] = Runs()

    def snapshot_path(self, t: TargetInfo) -> str:
        folder = t.folder or os.path.dirname(t.path)
        ensure_snapshot_dir(folder, t.slug)
        return snapshot_path(folder, t.slug)

    async def run(self, req: TraceRequest, msg_id: Any = None
                  ) -> tuple[RunningTrace, WorkerResult | None, str]:
        """Trace; returns the run, the worker's result (None if it never started) and the
        snapshot path it was told to write."""
        tid = req.target.id
        snapshot = self.snapshot_path(req.target)
        run = RunningTrace(req, snapshot, msg_id=msg_id)
        self.running.begin(tid, run)
        self.hooks.running_changed(run)
        settings = self.settings()
        python = python_executable(settings.python or req.target.python)
        argv, cwd, env = trace_command(req, snapshot, python)
        iterations = req.iterations or 2
        try:
            await self.hooks.begin_progress(run)

            def on_progress(record: dict[str, Any]) -> None:
                frac = _iteration_fraction(str(record.get("phase", "")), iterations)
                self.hooks.report_progress(run, progress_text(record),
                                           None if frac is None else int(100 * frac))

            def on_output(line: str) -> None:
                self.hooks.worker_output(run, line)

            worker = Worker(argv, cwd, env, settings.traceTimeout,
                            settings.memory_limit_bytes(), on_progress, on_output)
            if run.stopped_before_start:
                return run, None, snapshot
            run.worker = worker
            self.hooks.spawning(run)
            not_started = await start(worker, "trace", python)
            if not_started is not None:
                self.hooks.log(not_started.error["message"])
                return run, not_started, snapshot
            self.hooks.started(run, argv)
            result = await worker.run()
            return run, result, snapshot
        finally:
            if self.running.end(tid, run):  # not replaced by a newer run
                self.hooks.running_changed(run)
