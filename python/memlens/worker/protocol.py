"""How a parent process talks to a memlens worker (`python -m memlens run|trace ... --json
--progress json`), one module for its three parents: the language server (server/worker.py,
asyncio), `--ranks all` (distributed/workers.py, threads) and the tests.

- the worker's environment: the parent's, plus PYTHONPATH such that it imports this memlens;
- its command line: `trace_command` for a trace the language server asks for (every worker's
  command line is a command.WorkerCommand);
- where a target's snapshots go: `<folder>/.memlens/<kind>-<name>-<hash>/<time>.json`, the same
  for the CLI (folder: its working directory) and the language server (the workspace folder);
- stderr: progress records, one JSON object a line (`{"event": "progress", "phase": ...}`,
  written by progress.py), among the script's own output;
- stdout: the last line that is a JSON object is the result (the summary, or `{"error": ...}`);
  with `--with-digest`, the summary carries the snapshot's digest (snapshot/digest.py), so that
  the language server need not read the snapshot it is told about.

How a worker's processes end with it is process_tree.py.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from typing import Any, Protocol

from .command import WorkerCommand

PROGRESS_EVENT = "progress"


def worker_env(base: dict[str, str] | None = None, extra: dict[str, str] | None = None,
               defaults: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: `base` (default: this process's), the target's own variables
    (`extra`), `defaults` where neither sets them, and PYTHONPATH such that the worker imports
    this same memlens."""
    env = dict(os.environ if base is None else base)
    env.update(extra or {})
    for key, value in (defaults or {}).items():
        env.setdefault(key, value)
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("MEMLENS_SERVER", None)
    return env


def normalize_path(path: str) -> str:
    """The key a source file is known by (symlinks resolved, case folded where the file system
    ignores case)."""
    if not path or path.startswith("<"):
        return path
    return os.path.normcase(os.path.realpath(path))


# -- where snapshots go ------------------------------------------------------------------------
SNAPSHOT_DIR = ".memlens"


def snapshot_folder_name(kind: str, name: str, path: str, detail: str = "") -> str:
    """The folder under .memlens/ of one target's snapshots: its kind, its name (for people),
    and a hash of what tells it apart (kind, file, and the symbol, launch configuration or line
    within the file), so that the CLI and the language server agree on it."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:48].strip("_.") or "target"
    key = f"{kind}:{normalize_path(path)}:{detail}"
    return f"{kind}-{safe}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def snapshot_path(folder: str, folder_name: str) -> str:
    """A new snapshot's path in `<folder>/.memlens/<folder_name>/` (named by the time)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return os.path.join(folder, SNAPSHOT_DIR, folder_name, f"{stamp}.json")


def cli_snapshot_path(target: dict[str, Any], cwd: str) -> str:
    """Where `memlens run|trace` puts a target's snapshot by default (`target`: its
    `to_json()`): the folder the language server keeps the same target's snapshots in."""
    if target["kind"] == "model":
        name = detail = target["name"]
        path = target["path"]
    else:  # a script: named by its file, as the language server names it
        path = os.path.join(target.get("cwd") or "", target["path"]) if target.get("path") \
            else target["name"]
        name, detail = os.path.basename(path), ""
    return snapshot_path(cwd, snapshot_folder_name(target["kind"], name, path, detail))


# -- the worker's command line -------------------------------------------------------------
class TraceTarget(Protocol):
    """What `trace_command` reads of a target (server/targets.TargetInfo)."""
    kind: str  # model | script | launch | torchrun
    path: str
    line: int  # 0-based
    folder: str
    symbol: str | None
    program: str | None
    module: str | None
    args: list[str]
    cwd: str | None
    env: dict[str, str]
    world_size: int | None


class TraceAsk(Protocol):
    """What `trace_command` reads of a request (server/tracing.TraceRequest)."""
    target: TraceTarget
    device: str | None  # None: no --device (the recipe's, else the default)
    iterations: int | None
    world_size: int | None
    rank: int | None
    all_ranks: bool


def trace_command(req: TraceAsk, snapshot: str, python: str
                  ) -> tuple[list[str], str, dict[str, str]]:
    """argv, cwd and environment of the worker for one trace the language server asks for."""
    t = req.target
    # Distributed options: only when asked for, or when the launch configuration itself says
    # several processes. A shell script's job (world size included) comes from running it.
    world = req.world_size if req.world_size is not None else \
        (None if t.kind == "torchrun" else t.world_size)
    if req.world_size is None and (world is None or world <= 1):
        world = None
    if t.kind == "model":
        job, subcommand = [f"{t.path}:{t.symbol}"], "trace"
    elif t.kind == "torchrun":  # the CLI runs the script with recording launchers
        job, subcommand = ["--from-script", f"{t.path}:{t.line + 1}"], "run"
    else:
        job = ["--"] + ([t.program] if t.program else ["-m", t.module or ""]) + list(t.args)
        subcommand = "run"
    command = WorkerCommand(job, subcommand, device=req.device, world_size=world,
                            rank=None if req.all_ranks else req.rank, all_ranks=req.all_ranks,
                            iterations=req.iterations or None, snapshot=snapshot,
                            with_digest=True)
    cwd = t.cwd or t.folder or os.path.dirname(t.path)
    # A shell script's own variables reach the rank through the recording, as it sets them.
    return command.argv(python), cwd, worker_env(extra={} if t.kind == "torchrun" else t.env)


# -- what the worker writes ----------------------------------------------------------------
def progress_record(line: str) -> dict[str, Any] | None:
    """The progress record on this stderr line, or None for any other line."""
    if not line.startswith("{") or '"event"' not in line:
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("event") == PROGRESS_EVENT else None


def final_json(stdout: str) -> dict[str, Any] | None:
    """The worker's result: the last stdout line that is a JSON object."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
