"""`memlens run --ranks all`: trace every rank whose role differs, in parallel worker processes.

1. Rank 0 is traced first: what it builds (meshes, groups, who used them) decides which ranks
   are alike (roles.py). With two workers or more, the last rank is traced beside it: most
   often a role of its own (the last pipeline stage, the short end of an uneven shard), on a
   core that would wait otherwise; it represents its group (alike ranks answer for each
   other), and where it is alike rank 0 it is not used.
2. One rank of every other group is traced, `--jobs` workers at a time.
3. A per-rank table is printed; each traced rank's snapshot is written to `<stamp>.ranks/
   rank-R.json` with `index.json` naming them, and the worst rank's snapshot is also put at the
   snapshot path itself (`<stamp>.json`), where a reader that expects one snapshot finds it.

The index file (`"format": "memlens.ranks"`) is described in docs/snapshot-format.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from .env import RankSpec
from .rank_table import RanksProgress, rank_table, worst_rank
from .roles import RankGroup, group_ranks
from ..worker.result import WorkerResult
from .workers import run_pool

INDEX_FORMAT, INDEX_VERSION = "memlens.ranks", 1


@dataclass
class Outputs:
    snapshot: Path | None  # the worst rank's snapshot; None with --no-snapshot

    @property
    def directory(self) -> Path | None:
        if self.snapshot is None:
            return None
        return self.snapshot.with_name(self.snapshot.stem + ".ranks")

    def rank_snapshot(self, rank: int) -> Path | None:
        return self.directory / f"rank-{rank}.json" if self.directory else None

    def rank_log(self, rank: int) -> Path | None:
        return self.directory / f"rank-{rank}.log" if self.directory else None

    def discard(self, rank: int) -> None:
        """A rank traced but not used: its files go."""
        for path in (self.rank_snapshot(rank), self.rank_log(rank)):
            if path is not None:
                path.unlink(missing_ok=True)


def run_all(spec: RankSpec, worker_argv, jobs: int, outputs: Outputs, progress_mode: str,
            console, command: list[str], device, group: bool = True,
            env: dict[str, str] | None = None) -> tuple[dict[str, Any], int]:
    """Trace the job's distinct ranks (every rank with `group=False`). `worker_argv(rank,
    snapshot_path)` gives a worker's arguments, `env` variables it gets besides this process's;
    `device` is the target's DeviceSpec. Returns
    the index document and the exit status."""
    if outputs.directory:
        outputs.directory.mkdir(parents=True, exist_ok=True)
    with RanksProgress(progress_mode, console) as progress:
        def launch(ranks: list[int], workers: int) -> list[WorkerResult]:
            items = [(r, worker_argv(r, outputs.rank_snapshot(r)), outputs.rank_log(r))
                     for r in ranks]
            return run_pool(items, workers, progress.update,
                            lambda res: progress.done(res.rank, res.ok, _done_text(res)), env)

        if not group:
            first, *rest = launch(list(range(spec.world_size)), jobs)
            groups = [RankGroup(r, [r]) for r in range(spec.world_size)]
        else:
            last = spec.world_size - 1
            ahead = [last] if jobs >= 2 and last > 0 else []
            first, *early = launch([0, *ahead], 1 + len(ahead))
            if first.ok:
                groups = group_ranks(first.output.get("parallel") or {}, spec.world_size)
                if ahead and last not in groups[0].ranks:
                    groups = [RankGroup(last, g.ranks) if last in g.ranks else g
                              for g in groups]
                else:  # alike rank 0 (or not traced): not used
                    for rank in ahead:
                        outputs.discard(rank)
                    early = []
                rest = early + launch([g.representative for g in groups
                                       if g.representative not in (0, *ahead)], jobs)
            else:  # without rank 0's layout there is no grouping: report its failure
                for rank in ahead:
                    outputs.discard(rank)
                groups, rest = [RankGroup(0, [0])], []
    results = {r.rank: r for r in [first, *rest]}
    rows = [_row(g, results[g.representative], outputs) for g in groups]
    index = _index(spec, rows, outputs, command, first, device)
    _write(index, outputs)
    console.print(rank_table(rows, spec.world_size, device.name))
    _print_notes(first, console)
    _print_failures(rows, console, first.ok or not group, spec.world_size)
    return index, 0 if all(r["status"] == "ok" for r in rows) else 1


def _done_text(res: WorkerResult) -> str:
    from ..units import format_bytes

    if res.ok:
        return f"peak {format_bytes(res.output['peak_bytes'])} ({res.duration_s:.1f} s)"
    return f"failed: {res.failure().get('message', '').splitlines()[0][:120]}"


def _row(group: RankGroup, res: WorkerResult, outputs: Outputs) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": res.rank, "alike": group.ranks, "duration_s": res.duration_s}
    if not res.ok:
        return {**row, "status": "failed", "role": None, "error": res.failure(), "snapshot": None}
    s = res.output
    snap = outputs.rank_snapshot(res.rank)
    return {**row, "status": "ok", "role": (s.get("parallel") or {}).get("role"),
            "peak_bytes": s["peak_bytes"], "peak_phase": s["peak_phase"],
            "device_key": s.get("device_key"),
            "headroom_bytes": s["device_total_bytes"] - s["peak_bytes"],
            "verdict": _verdict(s),
            "snapshot": snap.name if snap else None}


def _verdict(s: dict[str, Any]) -> dict[str, Any]:
    """The rank's verdict against the card (reserved memory + what is outside the allocator),
    for readers of the index that rank configurations (`memlens fit`)."""
    oom = s.get("oom")
    return {"fits": s.get("fits"), "headroom_bytes": s.get("headroom_bytes"),
            "reserved_peak_bytes": s.get("reserved_peak_bytes"),
            "outside_allocator_bytes": s.get("outside_allocator_bytes"),
            "oom": {k: oom.get(k) for k in ("op", "phase", "file", "line", "requested_bytes",
                                            "reserved_needed_bytes")} if oom else None}


def _index(spec: RankSpec, rows, outputs: Outputs, command, first: WorkerResult, device) -> dict:
    s = first.output or {}
    worst = worst_rank(rows)
    return {"format": INDEX_FORMAT, "version": INDEX_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command, "world_size": spec.world_size,
            "nproc_per_node": spec.local_world_size,
            "device": device.name, "device_total_bytes": device.total_memory_bytes,
            "parallel": s.get("parallel") or {},
            "worst_rank": worst,
            "snapshot": str(outputs.snapshot) if outputs.snapshot and worst is not None else None,
            "ranks": rows}


def _write(index: dict, outputs: Outputs) -> None:
    if outputs.directory is None:
        return
    (outputs.directory / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    worst = index["worst_rank"]
    if worst is None:
        return
    source = outputs.rank_snapshot(worst)
    if outputs.snapshot.exists():
        outputs.snapshot.unlink()
    try:  # the same file twice, without twice the disk
        os.link(source, outputs.snapshot)
    except OSError:
        shutil.copyfile(source, outputs.snapshot)


def _print_notes(first, console) -> None:
    """What an integration changed about the run (the Megatron plugin's mock data, ...): the
    same for every rank of one script, so rank 0's."""
    for text in (first.output or {}).get("notes", []):
        console.print(f"[yellow]note:[/] {escape(text)}", highlight=False)


def _print_failures(rows, console, first_ok: bool, world_size: int) -> None:
    for row in rows:
        if row["status"] == "ok":
            continue
        e = row["error"]
        where = f"{e['file']}:{e['line']}: " if e.get("file") else ""
        # soft_wrap: an error is copied and searched for whole, so the terminal wraps it, not rich
        console.print(f"[bold red]rank {row['rank']} failed:[/] "
                      f"{escape(where + e.get('message', ''))}", highlight=False, soft_wrap=True)
    if not first_ok and world_size > 1:
        console.print("[yellow]the other ranks were not traced: which of them are alike is "
                      "learnt from rank 0's trace[/]")
