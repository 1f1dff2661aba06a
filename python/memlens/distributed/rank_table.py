"""What `--ranks all` shows: live progress per rank, and the per-rank table at the end."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rich import box
from rich.live import Live
from rich.table import Table

from ..units import format_bytes
from .roles import compact


class RanksProgress:
    """Modes: "rich" (a live table on a terminal), "json" (JSON lines on stderr, for a program
    running memlens, e.g. the language server), "lines" (a line per finished rank), "none"."""

    def __init__(self, mode: str, console) -> None:
        self.mode = mode
        self.console = console
        self.state: dict[int, str] = {}
        self.started: dict[int, float] = {}
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> "RanksProgress":
        if self.mode == "rich":
            self._live = Live(self._table(), console=self.console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def update(self, rank: int, phase: str) -> None:
        with self._lock:
            self.state[rank] = phase
            self.started.setdefault(rank, time.time())
        if self.mode == "json":
            sys.stderr.write(json.dumps({"event": "progress", "phase": phase, "rank": rank,
                                         "time": round(time.time(), 3)}) + "\n")
            sys.stderr.flush()
        elif self._live is not None:
            self._live.update(self._table())

    def done(self, rank: int, ok: bool, text: str) -> None:
        self.update(rank, "done" if ok else "failed")
        if self.mode == "lines":
            self.console.print(f"rank {rank}: {text}", highlight=False, markup=False)

    def _table(self) -> Table:
        table = Table(title="tracing ranks", box=box.SIMPLE, title_justify="left")
        table.add_column("rank", justify="right")
        table.add_column("state")
        table.add_column("time", justify="right")
        with self._lock:
            for rank in sorted(self.state):
                elapsed = time.time() - self.started.get(rank, time.time())
                table.add_row(str(rank), self.state[rank], f"{elapsed:.0f} s")
        return table


def rank_table(rows: list[dict[str, Any]], world_size: int, device: str) -> Table:
    """One row per traced rank (and the ranks it answers for), the worst rank marked."""
    worst = worst_rank(rows)
    table = Table(title=f"Ranks of a {world_size}-process job on {device}",
                  caption="◀ the worst rank" if worst is not None else None,
                  box=box.SIMPLE_HEAVY, title_justify="left", caption_justify="left")
    for col in ("rank", "alike", "role", "peak", "headroom", "phase of peak"):
        table.add_column(col, justify="right" if col in ("peak", "headroom") else "left",
                         no_wrap=col in ("rank", "peak", "headroom", "phase of peak"))
    for row in rows:
        mark, style = "", None
        if row["status"] != "ok":
            cells = ("-", "-", "failed (see below)")
            style = "red"
        else:
            head = row["headroom_bytes"]
            cells = (format_bytes(row["peak_bytes"]),
                     format_bytes(head) if head >= 0 else f"over by {format_bytes(-head)}",
                     row["peak_phase"] or "-")
            if row["rank"] == worst:
                mark, style = " ◀", "bold red" if head < 0 else "bold"
        table.add_row(f"{row['rank']}{mark}", compact(row["alike"]), row.get("role") or "-",
                      *cells, style=style)
    return table


def worst_rank(rows: list[dict[str, Any]]) -> int | None:
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return None
    return max(ok, key=lambda r: (r["peak_bytes"], -r["rank"]))["rank"]
