"""How a parent process talks to a memlens worker (`python -m memlens run|trace ... --json
--progress json`), one module for its three parents: the language server (server/worker.py,
asyncio), `--ranks all` (distributed/workers.py, threads) and the tests.

- the worker's environment: the parent's, plus PYTHONPATH such that it imports this memlens;
- stderr: progress records, one JSON object a line (`{"event": "progress", "phase": ...}`,
  written by progress.py), among the script's own output;
- stdout: the last line that is a JSON object is the result (the summary, or `{"error": ...}`).
"""

from __future__ import annotations

import json
import os
from typing import Any

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
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("MEMLENS_SERVER", None)
    return env


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
