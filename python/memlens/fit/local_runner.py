"""The default runner of `memlens fit`: traces in worker processes on this machine, `--jobs` at
a time (each a `memlens run` process, see trace_point.py)."""

from __future__ import annotations

import concurrent.futures as cf
import sys
import threading
from pathlib import Path
from typing import Any

from ..worker import warm
from .trace_point import point_env, trace


class LocalRunner:
    def __init__(self, jobs: int):
        self.slots = jobs
        self._pool = cf.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="memlens-fit")
        self._pending: dict[cf.Future, Any] = {}
        self._procs: set = set()
        self._lock = threading.Lock()
        self.description = f"{jobs} local worker{'s' if jobs != 1 else ''}"
        # Points are forked from one warm process started from this (the driver's) thread.
        warm.prestart(sys.executable, point_env())

    def submit(self, tag: Any, request: dict[str, Any], folder: Path) -> None:
        self._pending[self._pool.submit(trace, request, folder, self._procs)] = tag

    def in_flight(self) -> int:
        return len(self._pending)

    def wait(self) -> list[tuple[Any, dict[str, Any]]]:
        """Block until at least one trace finished; (tag, result) of those that did."""
        done, _ = cf.wait(list(self._pending), return_when=cf.FIRST_COMPLETED)
        out = []
        for future in done:
            tag = self._pending.pop(future)
            try:
                out.append((tag, future.result()))
            except Exception as e:  # the worker could not even be started
                out.append((tag, {"status": "error", "retry": True,
                                  "error": {"kind": type(e).__name__, "message": str(e)}}))
        return out

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for process in list(self._procs):
                process.stop()
        self._pool.shutdown(wait=not cancel, cancel_futures=cancel)
