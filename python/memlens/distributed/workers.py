"""Worker processes that trace one rank each: `python -m memlens run --rank R --json ...`.

A worker is a separate process, so user code that crashes, hangs on a lock or exhausts memory in
one rank never takes the parent down; its failure comes back as that rank's message. Workers
report progress as JSON lines on stderr (`--progress json`); everything else they write there
is the rank's log.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Callable

from ..worker import warm
from ..worker.protocol import progress_record, worker_env
from ..worker.result import WorkerResult, ended_result

LOG_TAIL = 40  # lines of a worker's log kept for its failure report


def run_worker(argv: list[str], rank: int, on_progress: Callable[[int, str], None],
               log_path: Path | None = None, env: dict[str, str] | None = None) -> WorkerResult:
    """Run one worker to its end (the process's, not its pipes': a child the script left
    running may hold them) and end whatever it started. `on_progress(rank, phase)` is called
    from a reader thread. Run in the thread that waits for it (the worker dies with the thread
    that started it)."""
    tail: deque[str] = deque(maxlen=LOG_TAIL)
    log = open(log_path, "w", encoding="utf-8") if log_path else None

    def stderr_line(line: str) -> None:
        record = progress_record(line)
        if record is not None:
            on_progress(rank, str(record.get("phase", "")))
            return
        tail.append(line)
        if log is not None:
            try:
                log.write(line + "\n")
            except ValueError:  # closed: a reader left behind by a worker's leftover
                pass

    # One thread per worker, as torchrun does for several processes per node.
    # In the command's directory: a forked worker would start in the warm process's ("/").
    process = warm.worker_process([sys.executable, "-m", "memlens", *argv], os.getcwd(),
                                  rank_env(env), on_stderr_line=stderr_line)
    try:
        process.start()
        ended = process.wait()
    finally:
        process.stop()
        if log:
            log.close()
    return ended_result(ended, list(tail), rank=rank)


def rank_env(env: dict[str, str] | None) -> dict[str, str]:
    return worker_env(extra=env, defaults={"OMP_NUM_THREADS": "1"})


def run_pool(jobs: list[tuple[int, list[str], Path | None]], workers: int,
             on_progress: Callable[[int, str], None],
             on_done: Callable[[WorkerResult], None], env: dict[str, str] | None = None
             ) -> list[WorkerResult]:
    """Run (rank, argv, log path) jobs, at most `workers` at a time (with `env` besides this
    process's environment); results in job order."""
    results: dict[int, WorkerResult] = {}
    lock = threading.Lock()
    queue = list(jobs)

    def loop() -> None:
        while True:
            with lock:
                if not queue:
                    return
                rank, argv, log_path = queue.pop(0)
            on_progress(rank, "starting")
            res = run_worker(argv, rank, on_progress, log_path, env)
            with lock:
                results[rank] = res
            on_done(res)

    # The ranks are forked from one warm process (worker/warm.py), started from this thread,
    # which outlives them all: each rank skips torch's and memlens' imports.
    warm.prestart(sys.executable, rank_env(env))
    threads = [threading.Thread(target=loop, daemon=True)
               for _ in range(max(1, min(workers, len(jobs))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[rank] for rank, _, _ in jobs]
