"""The trace worker: `python -m memlens run|trace ... --json --progress json` in a process of its
own, never in the server.

It runs in a new session (its own process group), so that cancelling or a time-out ends it and
every child it started; under an address-space limit (RLIMIT_AS); and its stderr is read as it
comes for the JSON progress lines of memlens.progress. On failure the CLI prints one
`{"error": {...}}` object on stdout, with the user's file, line and traceback.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..worker_protocol import final_json, progress_record, worker_env

try:
    import resource
except ImportError:  # not POSIX
    resource = None  # type: ignore[assignment]

_STDERR_TAIL = 200


@dataclass
class WorkerResult:
    status: str  # ok | failed | cancelled | timeout
    returncode: int | None
    output: dict[str, Any] | None  # the JSON object the CLI printed on stdout
    stderr_tail: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def error(self) -> dict[str, Any] | None:
        if self.output and isinstance(self.output.get("error"), dict):
            return self.output["error"]
        return None


def _libc_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()
_PR_SET_PDEATHSIG = 1


def _preexec(limit: int | None) -> Callable[[], None] | None:
    """What the child does between fork and exec: take the memory limit, and die with the
    server (so a server killed outright leaves no worker behind). No imports, no locks here."""
    setrlimit = soft = hard = None
    if limit is not None and resource is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        setrlimit = resource.setrlimit
    prctl = _PRCTL
    if setrlimit is None and prctl is None:
        return None
    which = resource.RLIMIT_AS if resource is not None else None

    def apply() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if setrlimit is not None:
            try:
                setrlimit(which, (soft, hard))
            except (ValueError, OSError):
                pass

    return apply


def kill_group(pid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal the process group led by `pid` (the worker and everything it started)."""
    if os.name != "posix":
        try:
            os.kill(pid, signal.SIGTERM)
            return True
        except OSError:
            return False
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class Worker:
    """One worker process. `await run()` returns when it ends, however it ends."""

    def __init__(self, argv: list[str], cwd: str | None, env: dict[str, str],
                 time_limit: float | None, memory_limit: int | None,
                 on_progress: Callable[[dict[str, Any]], None] = lambda record: None,
                 on_output: Callable[[str], None] = lambda line: None):
        self.argv, self.cwd, self.env = argv, cwd, env
        self.time_limit, self.memory_limit = time_limit, memory_limit
        self.on_progress, self.on_output = on_progress, on_output
        self.proc: asyncio.subprocess.Process | None = None
        self._stop_reason: str | None = None  # "cancelled" or "timeout"
        self._stopped = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=self.cwd, env=self.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=os.name == "posix", preexec_fn=_preexec(self.memory_limit),
            limit=1024 * 1024)

    def stop(self, reason: str = "cancelled") -> None:
        """End the worker and its children now (idempotent)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        if self.proc is not None:
            kill_group(self.proc.pid)
        self._stopped.set()

    async def _read_stderr(self, tail: collections.deque) -> None:
        assert self.proc and self.proc.stderr
        while True:
            try:
                raw = await self.proc.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):  # a line over the limit
                continue
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\n")
            record = progress_record(line)
            if record is not None:
                self.on_progress(record)
                continue
            tail.append(line)
            self.on_output(line)

    async def run(self) -> WorkerResult:
        started = time.monotonic()
        if self.proc is None:
            await self.start()
        assert self.proc and self.proc.stdout
        tail: collections.deque = collections.deque(maxlen=_STDERR_TAIL)
        stdout_task = asyncio.ensure_future(self.proc.stdout.read())
        stderr_task = asyncio.ensure_future(self._read_stderr(tail))
        wait_task = asyncio.ensure_future(self.proc.wait())
        stop_task = asyncio.ensure_future(self._stopped.wait())
        try:
            done, _ = await asyncio.wait({wait_task, stop_task}, timeout=self.time_limit,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                self.stop("timeout")
            if not wait_task.done():
                await wait_task
        except asyncio.CancelledError:
            self.stop("cancelled")
            raise
        finally:
            # Children the worker left behind (data loader workers, ...) go with it.
            kill_group(self.proc.pid)
            stop_task.cancel()
        try:
            out_bytes = await asyncio.wait_for(stdout_task, 5)
            await asyncio.wait_for(stderr_task, 5)
        except asyncio.TimeoutError:  # a grandchild kept the pipes open
            out_bytes = b""
        output = final_json(out_bytes.decode("utf-8", "replace"))
        rc = self.proc.returncode
        if self._stop_reason is not None:
            status = self._stop_reason
        elif rc == 0 and output is not None and "error" not in output:
            status = "ok"
        else:
            status = "failed"
        return WorkerResult(status, rc, output, list(tail), time.monotonic() - started)


memlens_env = worker_env  # the name the server's modules and tests use


def python_executable(configured: str | None) -> str:
    return configured or sys.executable
