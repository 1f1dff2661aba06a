"""Trace one point of the search: `python -m memlens run --recorded-job JOB --json` in a worker
process (with `--ranks all` for a job of several processes, so only its distinct ranks are
traced), and its result, read from the worker's JSON, on the worst rank.

The same function runs in a local worker thread and inside a Ray task: it writes into the folder
it is given and returns a plain dict (what it wrote is read back by the Ray runner).

The result: `{status: "ok", fits, worst_rank, ranks_traced, peak_bytes, reserved_peak_bytes,
outside_allocator_bytes, headroom_bytes, device_total_bytes, oom, duration_s, snapshot}`, or
`{status: "error", error: {kind, message, file, line}, retry}`; `retry` is true when the worker
itself failed (no result: killed, crashed), which is worth one more try, and false for an error
of the script, which another try would only repeat.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..worker import warm
from ..worker.command import WorkerCommand
from ..worker.protocol import progress_record, worker_env
from ..worker.result import ended_result

JOB_FILE, SNAPSHOT_FILE, LOG_FILE = "job.json", "snapshot.json", "trace.log"
LOG_TAIL = 10


def worker_argv(request: dict[str, Any], folder: Path) -> list[str]:
    world = request.get("world_size") or 1
    several = world > 1  # all its ranks, one worker at a time (the search runs points at once)
    return WorkerCommand(
        ["--recorded-job", str(folder / JOB_FILE)], device=request["device"],
        world_size=world if several else None,
        nproc_per_node=request.get("nproc_per_node") or None if several else None,
        all_ranks=several, jobs=1 if several else None, iterations=request.get("iterations"),
        snapshot=str(folder / SNAPSHOT_FILE) if request.get("snapshots", True) else False,
        debug=bool(request.get("debug"))).args()


def point_env() -> dict[str, str]:
    return worker_env(defaults={"OMP_NUM_THREADS": "1"})


def trace(request: dict[str, Any], folder: Path, running: set | None = None) -> dict[str, Any]:
    """Run the point's trace into `folder` and return its result. The worker and everything it
    starts (the rank workers of `--ranks all`) end together (worker/process_tree): `running` holds
    the WorkerProcess while it runs, so that an interrupted driver can stop it; an exception
    here (Ctrl-C, a cancelled Ray task) stops it too."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / JOB_FILE).write_text(json.dumps(request["job"]), encoding="utf-8")
    lines: list[str] = []

    def stderr_line(line: str) -> None:
        if progress_record(line) is None:
            lines.append(line)

    process = warm.worker_process([sys.executable, "-m", "memlens",
                                   *worker_argv(request, folder)],
                                  request.get("cwd"), point_env(), on_stderr_line=stderr_line)
    if running is not None:
        running.add(process)
    try:
        process.start()
        ended = process.wait()
    finally:
        process.stop()
        if running is not None:
            running.discard(process)
    (folder / LOG_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8", errors="replace")
    worker = ended_result(ended, lines)
    result = read_result(worker.output, worker.returncode, worker.log)
    result["duration_s"] = worker.duration_s
    return result


def read_result(out: dict[str, Any] | None, returncode: int, log: list[str]) -> dict[str, Any]:
    """The point's result from the worker's JSON: a single-process summary or a rank index."""
    if out is None:
        tail = "\n".join(log[-LOG_TAIL:])
        return {"status": "error", "retry": True, "error": {
            "kind": "WorkerFailed",
            "message": f"the trace's worker exited with status {returncode} and no result"
                       + (f":\n{tail}" if tail else "")}}
    if out.get("format") == "memlens.ranks":
        return _from_index(out)
    if "error" in out:
        return _error(out["error"])
    verdict = {k: out.get(k) for k in ("fits", "headroom_bytes", "reserved_peak_bytes",
                                        "outside_allocator_bytes", "oom")}
    return _ok(verdict, out["peak_bytes"], out["device_total_bytes"], out.get("rank", 0), 1,
               out.get("snapshot"))


def _from_index(index: dict[str, Any]) -> dict[str, Any]:
    rows = index["ranks"]
    failed = next((r for r in rows if r["status"] != "ok"), None)
    if failed is not None:
        error = dict(failed["error"])
        error["message"] = f"rank {failed['rank']}: {error.get('message', '')}"
        return _error(error)
    worst = min(rows, key=lambda r: (_headroom(r), r["rank"]))
    return _ok(worst["verdict"], worst["peak_bytes"], index["device_total_bytes"],
               worst["rank"], len(rows), index.get("snapshot"))


def _headroom(row: dict[str, Any]) -> int:
    h = row["verdict"]["headroom_bytes"]
    return h if h is not None else row["headroom_bytes"]


def _ok(verdict: dict, peak: int, total: int, rank: int, traced: int, snapshot) -> dict:
    oom = verdict.get("oom")
    headroom = verdict.get("headroom_bytes")
    return {"status": "ok", "fits": bool(verdict.get("fits")) and oom is None,
            "worst_rank": rank, "ranks_traced": traced, "peak_bytes": peak,
            "reserved_peak_bytes": verdict.get("reserved_peak_bytes"),
            "outside_allocator_bytes": verdict.get("outside_allocator_bytes"),
            "headroom_bytes": headroom if headroom is not None else total - peak,
            "device_total_bytes": total,
            "oom": {k: oom.get(k) for k in ("op", "phase", "file", "line")} if oom else None,
            "snapshot": Path(snapshot).name if snapshot else None}


def _error(error: dict[str, Any]) -> dict[str, Any]:
    keep = {k: error.get(k) for k in ("kind", "message", "file", "line") if error.get(k)}
    return {"status": "error", "retry": False, "error": keep}
