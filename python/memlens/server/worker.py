"""The trace worker: `python -m memlens run|trace ... --json --progress json` in a process of its
own, never in the server, run by worker/process_tree's WorkerProcess (a session of its own, a
subreaper, under an address-space limit, its tree ended with it) and awaited here without
blocking the event loop. Its stderr is read as it comes for the JSON progress lines of
memlens.progress; on failure the CLI prints one `{"error": {...}}` object on stdout, with the
user's file, line and traceback.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
from typing import Any, Callable

from ..worker import warm
from ..worker.process_tree import Ended, WorkerProcess
from ..worker.protocol import progress_record
from ..worker.result import WorkerResult, ended_result

_STDERR_TAIL = 200


class Worker:
    """One worker process. `await run()` returns when it ends, however it ends."""

    def __init__(self, argv: list[str], cwd: str | None, env: dict[str, str],
                 time_limit: float | None, memory_limit: int | None,
                 on_progress: Callable[[dict[str, Any]], None] = lambda record: None,
                 on_output: Callable[[str], None] = lambda line: None):
        self.argv, self.time_limit = argv, time_limit
        self.on_progress, self.on_output = on_progress, on_output
        self.cwd, self.env, self.memory_limit = cwd, env, memory_limit
        self.process: WorkerProcess | None = None  # cold, or forked from the warm worker
        self._tail: collections.deque = collections.deque(maxlen=_STDERR_TAIL)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_reason: str | None = None  # "cancelled", "replaced" or "timeout"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Start the process, from the event loop's thread: the worker dies with the thread that
        started it (PR_SET_PDEATHSIG), and this one lives as long as the server."""
        self._loop = asyncio.get_running_loop()
        if self.process is None:
            if self.argv[1:3] == ["-m", "memlens"]:  # from this thread: see warm.prestart
                warm.prestart(self.argv[0], self.env, warm.needs_shim(self.argv))
            self.process = await _in_thread(warm.worker_process, self.argv, self.cwd,
                                            self.env, self.memory_limit, self._stderr_line)
            if self._stop_reason is not None:
                self.process.stop()
        if self.process.proc is None:
            self.process.start()

    def stop(self, reason: str = "cancelled") -> None:
        """End the worker and its children now (idempotent)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        if self.process is not None:
            self.process.stop()

    def _stderr_line(self, line: str) -> None:  # a reader thread
        try:
            self._loop.call_soon_threadsafe(self._dispatch, line)
        except RuntimeError:  # the loop has closed: nobody is listening any more
            pass

    def _dispatch(self, line: str) -> None:
        record = progress_record(line)
        if record is not None:
            self.on_progress(record)
            return
        self._tail.append(line)
        self.on_output(line)

    async def run(self) -> WorkerResult:
        await self.start()
        try:
            ended: Ended = await _in_thread(self.process.wait, self.time_limit)
        except asyncio.CancelledError:
            self.stop("cancelled")
            raise
        return ended_result(ended, list(self._tail), self._stop_reason)


def _in_thread(fn, *args) -> asyncio.Future:
    """`fn(*args)` in a thread of its own (a trace may take many minutes: not one of the default
    executor's few threads, which the workspace scan needs)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value, error) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def body() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            value, error = None, e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop has closed
            pass

    threading.Thread(target=body, daemon=True).start()
    return future


def python_executable(configured: str | None) -> str:
    return configured or sys.executable
