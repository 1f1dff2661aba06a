"""What `memlens.fit` means on the LSP side: `memlens fit --json --progress json` for a target in
a worker of its own (server/worker.py: its own session, its tree ended with it, so a cancel or a
time limit ends every trace the search started), `$/progress` as its points finish, and the
search's document as a FitResult (payloads.fit_report). The space is the request's options in
the CLI's syntax over the workspace's `[tool.memlens.fit]`, which the CLI itself reads: the
server only says whether there is one (`memlens/fitSpace`), for the editor to ask otherwise."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from lsprotocol import types as lsp

from ..errors import MemlensError
from ..fit.axes_from_options import load_config
from ..fit.report import SORT_KEYS
from ..fit.script_options import argparse_flags
from ..fit.space import BUILTIN_AXES
from ..units import format_bytes
from ..worker.command import WorkerCommand
from ..worker.protocol import worker_env
from . import payloads
from . import protocol as P
from .client import LspClient
from .settings import Settings
from .targets import TargetInfo
from .tracing import TraceRequest, explain_failure
from .jobs import Runs, WorkerRun, start
from .worker import Worker, WorkerResult, python_executable

# The options of `memlens fit` that shape the space; anything else is the server's to choose.
SPACE_OPTIONS = {f"--{name}" for name in BUILTIN_AXES} | {"--axis", "--arg", "--env",
                                                          "--monotone"}
FINISHED = {"ok": "done", "failed": "failed", "timeout": "timed out", "cancelled": "cancelled",
            "replaced": "replaced by a newer search"}


@dataclass
class FitRequest:
    target: TargetInfo
    device: str | None  # None: the recipe's / [tool.memlens.fit]'s, else the default
    iterations: int | None
    space: list[str]  # `--flag=value` options of the space
    sort: str | None = None
    jobs: int = 1


def space_options(raw: Any) -> list[str]:
    """The request's space as `--flag=value` options, each an option of the space."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise MemlensError(f"space must be a list of strings (memlens fit options), got {raw!r}")
    out, i = [], 0
    while i < len(raw):
        flag, sep, value = raw[i].partition("=")
        if flag not in SPACE_OPTIONS:
            raise MemlensError(f"space: {raw[i]!r} is not an option of the space; use "
                               f"{', '.join(sorted(SPACE_OPTIONS))}")
        if not sep:
            if i + 1 >= len(raw):
                raise MemlensError(f"space: {flag} needs a value, e.g. {flag} 1,2,4")
            i += 1
            value = raw[i]
        out.append(f"{flag}={value}")
        i += 1
    return out


def fit_command(req: FitRequest, python: str) -> tuple[list[str], str, dict[str, str]]:
    """argv, cwd and environment of the worker that runs the search."""
    t = req.target
    extra = list(req.space)
    # A launch configuration of several processes: its world size, unless the space varies it.
    if t.kind == "launch" and (t.world_size or 1) > 1 and \
            not any(o.startswith("--gpus=") for o in req.space):
        extra.append(f"--gpus={t.world_size}")
    if t.kind == "torchrun":  # the CLI runs the shell script with recording launchers
        job = ["--from-script", f"{t.path}:{t.line + 1}"]
    elif t.kind in ("script", "launch"):
        job = ["--"] + ([t.program] if t.program else ["-m", t.module or ""]) + list(t.args)
    else:
        raise MemlensError(f"{t.name} is a model class: a search runs a training script, a "
                           "launch configuration or a torchrun line (each point is a job)")
    argv = WorkerCommand(job, "fit", device=req.device, jobs=req.jobs,
                         iterations=req.iterations or None, options=(("--sort", req.sort),),
                         extra=extra).argv(python)
    return argv, cwd_of(t), worker_env(extra={} if t.kind == "torchrun" else t.env)


def cwd_of(t: TargetInfo) -> str:
    return t.cwd or t.folder or str(Path(t.path).parent)


def script_flags(t: TargetInfo):
    """The integer argparse flags of the Python script a target runs (none for a module run
    with -m or a shell script's line whose program is not a file)."""
    program = t.path if t.kind == "script" else t.program
    if not program:
        return []
    path = Path(program) if Path(program).is_absolute() else Path(cwd_of(t)) / program
    try:
        return argparse_flags(path.read_text(encoding="utf-8")) if path.suffix == ".py" else []
    except (OSError, UnicodeDecodeError):
        return []


@dataclass
class RunningFit(WorkerRun):
    request: FitRequest


class FitCommands:
    """`memlens.fit` and `memlens/fitSpace`: one search per target at a time (a new one replaces
    it), cancelled by `$/cancelRequest` or the progress' cancel button."""

    def __init__(self, client: LspClient, settings: Callable[[], Settings],
                 trace_request: Callable[[dict[str, Any]], Awaitable[TraceRequest]]):
        self.client = client
        self.settings = settings
        self.trace_request = trace_request  # the target, device and iterations, as a trace's
        self.running: Runs[RunningFit] = Runs()

    async def request_from(self, params: dict[str, Any]) -> tuple[FitRequest, TraceRequest]:
        base = await self.trace_request(params)
        sort = params.get("sort")
        if sort is not None and sort not in SORT_KEYS:
            raise MemlensError(f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
        jobs = params.get("jobs", 1)
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise MemlensError(f"jobs must be a positive integer, got {jobs!r}")
        return FitRequest(base.target, base.device, base.iterations,
                          space_options(params.get("space")), sort, jobs), base

    async def space(self, params: dict[str, Any]) -> P.FitSpaceResult:
        """The `[tool.memlens.fit]` (or memlens.toml `[fit]`) the search of a target would read."""
        t = (await self.trace_request(params)).target
        table, source = await asyncio.to_thread(load_config, None, Path(cwd_of(t)))
        flags = await asyncio.to_thread(script_flags, t)
        return {"source": source if table else None, "keys": sorted(table),
                "flags": [{"flag": f.flag, "default": f.default, "help": f.help,
                           "axis": f.axis(), "space": f.space()} for f in flags]}

    async def fit(self, params: dict[str, Any], msg_id: Any) -> P.FitResult:
        req, base = await self.request_from(params)
        t = req.target
        settings = self.settings()
        python = python_executable(settings.python or t.python)
        argv, cwd, env = fit_command(req, python)
        run = RunningFit(req, msg_id=msg_id)
        self.running.begin(t.id, run)
        try:
            result = await self._run(run, argv, cwd, env, settings, python)
        finally:
            self.running.end(t.id, run)
        out = self._result(run, result, base, settings, python)
        if run.token is not None:
            self.client.end_progress(run.token, FINISHED.get(out["status"], out["status"]))
        return out

    async def _run(self, run: RunningFit, argv: list[str], cwd: str, env: dict[str, str],
                   settings: Settings, python: str) -> WorkerResult | None:
        token = await self.client.begin_progress(f"Finding what fits: {run.request.target.name}")
        run.token = token
        limit = settings.traceTimeout
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline: list[asyncio.TimerHandle] = []

        def time_out() -> None:
            if run.worker is not None:
                run.worker.stop("timeout")

        def set_deadline(seconds: float) -> None:
            for handle in deadline:
                handle.cancel()
            deadline[:] = [loop.call_at(started + seconds, time_out)]

        def on_progress(record: dict[str, Any]) -> None:
            points = int(record.get("points") or 0)
            if record.get("settled") == 0 or not deadline:
                set_deadline(limit * (points + 1))  # the time limit of a trace, per point
            if token is not None:
                message, pct = progress_message(record)
                self.client.report_progress(token, message, pct)

        def on_output(line: str) -> None:
            self.client.log(f"[fit {run.request.target.name}] {line}", lsp.MessageType.Log)

        worker = Worker(argv, cwd, env, None, settings.memory_limit_bytes(), on_progress,
                        on_output)
        if run.stopped_before_start:
            return None
        run.worker = worker
        set_deadline(limit)  # until the space is known: the job is being read
        not_started = await start(worker, "fit", python)
        if not_started is not None:
            return not_started
        self.client.log(f"finding what fits for {run.request.target.name}: {' '.join(argv)} "
                        f"(pid {worker.pid})")
        try:
            return await worker.run()
        finally:
            for handle in deadline:
                handle.cancel()

    def _result(self, run: RunningFit, result: WorkerResult | None, base: TraceRequest,
                settings: Settings, python: str) -> P.FitResult:
        t = run.request.target
        out: P.FitResult = {"targetId": t.id, "status": "cancelled",
                            "durationS": round(result.duration_s, 3) if result else 0.0}
        if result is None:
            out["status"] = run.stopped_before_start or "cancelled"  # type: ignore[typeddict-item]
            return out
        out["status"] = result.status  # type: ignore[typeddict-item]
        if result.status == "ok":
            out["fit"] = payloads.fit_report(result.output or {})
            c = out["fit"]["counts"]
            self.client.log(f"fit of {t.name} done: {c['fits']} of {c['points']} points fit, "
                            f"{c['traced']} traced; {out['fit']['runDir']}")
        elif result.status == "timeout":
            out["error"] = {"kind": "Timeout", "message": (
                f"The search for {t.name} ran past its time limit of "
                f"{settings.traceTimeout:g} s per point and was stopped (setting "
                "memlens.traceTimeout); the points it finished are kept: the same search "
                "resumes from them.")}
        elif result.status == "failed":
            out["error"] = explain_failure(result, base, settings, python)  # type: ignore
            self.client.log(f"fit of {t.name} failed: {out['error']['message']}",
                            lsp.MessageType.Warning)
        return out

    def on_cancel_request(self, msg_id: Any) -> None:
        run = self.running.by_msg_id(msg_id)
        if run is not None:
            run.stop("cancelled")

    def on_progress_cancel(self, token: Any) -> None:
        run = self.running.by_token(token)
        if run is not None:
            run.stop("cancelled")


def progress_message(record: dict[str, Any]) -> tuple[str, int | None]:
    """"3/8 settled · micro-batch=4: fits, peak 20.1 GiB, headroom 50.3 GiB", and the share of
    the points settled."""
    points, settled = int(record.get("points") or 0), int(record.get("settled") or 0)
    text = f"{settled}/{points} settled" if points else "reading the job"
    if record.get("point"):
        text += f" · {record['point']}: {record.get('verdict', '')}"
        if record.get("peak_bytes") is not None:
            text += f", peak {format_bytes(record['peak_bytes'])}"
        if record.get("headroom_bytes") is not None:
            text += f", headroom {format_bytes(record['headroom_bytes'])}"
    return text, int(100 * settled / points) if points else None
