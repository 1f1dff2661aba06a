"""Worker processes that trace one rank each: `python -m memlens run --rank R --json ...`.

A worker is a separate process, so user code that crashes, hangs on a lock or exhausts memory in
one rank never takes the parent down; its failure comes back as that rank's message. Workers
report progress as JSON lines on stderr (`--progress json`); everything else they write there
is the rank's log.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..worker_protocol import final_json, progress_record, worker_env

LOG_TAIL = 40  # lines of a worker's log kept for its failure report


@dataclass
class RankResult:
    rank: int
    returncode: int = -1
    summary: dict[str, Any] | None = None  # the worker's --json object
    log: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.summary is not None and "error" not in self.summary

    @property
    def error(self) -> dict[str, Any]:
        if self.summary and isinstance(self.summary.get("error"), dict):
            return self.summary["error"]
        tail = "\n".join(self.log[-10:])
        return {"kind": "WorkerFailed", "message": f"the worker exited with status "
                f"{self.returncode}" + (f":\n{tail}" if tail else "")}


def memlens_env() -> dict[str, str]:
    """The worker environment (worker_protocol), with one thread per worker."""
    env = worker_env()
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does for several processes per node
    return env


def run_worker(argv: list[str], rank: int, on_progress: Callable[[int, str], None],
               log_path: Path | None = None) -> RankResult:
    """Run one worker to its end. `on_progress(rank, phase)` is called from a reader thread."""
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "memlens", *argv], env=memlens_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    result = RankResult(rank)
    tail: deque[str] = deque(maxlen=LOG_TAIL)
    log = open(log_path, "w", encoding="utf-8") if log_path else None
    reader = threading.Thread(target=_read_stderr, args=(proc, rank, on_progress, tail, log),
                              daemon=True)
    reader.start()
    stdout = proc.stdout.read() if proc.stdout else ""
    result.returncode = proc.wait()
    reader.join()
    if log:
        log.close()
    result.log = list(tail)
    result.summary = final_json(stdout)
    result.duration_s = round(time.time() - started, 3)
    return result


def _read_stderr(proc, rank, on_progress, tail, log) -> None:
    for line in proc.stderr:
        record = progress_record(line.rstrip("\n"))
        if record is not None:
            on_progress(rank, str(record.get("phase", "")))
            continue
        tail.append(line.rstrip("\n"))
        if log:
            log.write(line)


def run_pool(jobs: list[tuple[int, list[str], Path | None]], workers: int,
             on_progress: Callable[[int, str], None],
             on_done: Callable[[RankResult], None]) -> list[RankResult]:
    """Run (rank, argv, log path) jobs, at most `workers` at a time; results in job order."""
    results: dict[int, RankResult] = {}
    lock = threading.Lock()
    queue = list(jobs)

    def loop() -> None:
        while True:
            with lock:
                if not queue:
                    return
                rank, argv, log_path = queue.pop(0)
            on_progress(rank, "starting")
            res = run_worker(argv, rank, on_progress, log_path)
            with lock:
                results[rank] = res
            on_done(res)

    threads = [threading.Thread(target=loop, daemon=True)
               for _ in range(max(1, min(workers, len(jobs))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[rank] for rank, _, _ in jobs]
