"""Progress of a trace: phase and iteration, shown with rich on a terminal, or as JSON lines on
stderr for a program that runs memlens as a worker (the language server)."""

from __future__ import annotations

import json
import sys
import time


class Progress:
    def __init__(self, mode: str, console=None, rank: int | None = None):
        self.mode = mode  # "rich", "json" or "none"
        self.console = console
        self.rank = rank
        self._status = None

    def __enter__(self) -> "Progress":
        if self.mode == "rich" and self.console is not None:
            self._status = self.console.status("starting", spinner="dots")
            self._status.__enter__()
        self.update("starting")
        return self

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
            self._status = None

    def update(self, phase: str, **extra) -> None:
        if self.mode == "json":
            record = {"event": "progress", "phase": phase, "time": round(time.time(), 3), **extra}
            if self.rank is not None:
                record["rank"] = self.rank
            sys.stderr.write(json.dumps(record) + "\n")
            sys.stderr.flush()
        elif self._status is not None:
            where = f"rank {self.rank} · " if self.rank is not None else ""
            self._status.update(f"tracing: {where}{phase}")
