"""The driver of a search: hands points to the runner as the search allows, records results as
they stream back (into the run folder first, so an interrupt loses none), retries a failed
worker once, and assembles what is printed, written and returned."""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..units import format_bytes
from . import report
from .html_page import write_page
from .run_dir import RunDir, fingerprint
from .script_flags import apply_point
from .search import FITS, Search
from .space import Point

MAX_ATTEMPTS = 2  # a worker that failed is traced once more


class Fit:
    def __init__(self, job, space, device, iterations, args, runner, command, sort):
        self.job, self.space, self.device, self.iterations = job, space, device, iterations
        self.args, self.runner, self.command, self.sort = args, runner, command, sort
        self.search = Search(space, prune=not args.no_prune, all_fits=args.all_fits)
        identity = {"job": job.to_json(), "space": space.describe(), "device": device.name,
                    "iterations": iterations}
        name = job.target.name or "job"
        run_dir = Path(args.run_dir) if args.run_dir else (
            Path.cwd() / ".memlens" / "fit" / f"{name}-{fingerprint(identity)[:10]}")
        self.run_dir = RunDir(run_dir, identity)

    def world_of(self, point: Point) -> int:
        gpus = point.get(self.space.axes, "gpus")
        return int(gpus) if gpus else (self.job.world_size or 1)

    def request(self, point: Point) -> dict[str, Any]:
        job = apply_point(self.job, self.space.axes, point)
        return {"job": job.to_json(), "device": self.device.name, "iterations": self.iterations,
                "world_size": self.world_of(point),
                "nproc_per_node": self.args.nproc_per_node or job.nproc_per_node,
                "snapshots": not self.args.no_snapshots, "cwd": job.target.cwd,
                "debug": False}

    def _folder(self, point: Point) -> Path:
        return self.run_dir.point_folder(point.folder(self.space.axes))

    def search_all(self, on_event) -> bool:
        """Trace until the search is done; True when interrupted (Ctrl-C)."""
        axes = self.space.axes
        for p in self.space.points:  # what an earlier run of this search finished
            saved = self.run_dir.finished(p.folder(axes), p.key(axes))
            if saved is not None:
                self.search.record(p, saved, resumed=True)
        attempts: dict[Point, int] = {}
        try:
            while not self.search.done():
                while self.runner.in_flight() < self.runner.slots:
                    p = self.search.next_point()
                    if p is None:
                        break
                    self._submit(p, attempts)
                    on_event("start", p, None)
                if self.runner.in_flight() == 0:
                    break
                for p, result in self.runner.wait():
                    if result.get("retry") and attempts[p] < MAX_ATTEMPTS:
                        on_event("retry", p, result)
                        self._submit(p, attempts)
                        continue
                    result["attempts"] = attempts[p]
                    if not result.get("retry"):  # a failed worker is traced again on resume
                        self.run_dir.save_result(p.folder(axes), p.key(axes), result)
                    self.search.record(p, result)
                    on_event("done", p, result)
                    self.run_dir.save_index(self.document(interrupted=False))
        except KeyboardInterrupt:
            self.runner.close(cancel=True)
            for p in list(self.search.running):
                self.search.abandon(p)
            return True
        self.runner.close()
        return False

    def _submit(self, p: Point, attempts: dict[Point, int]) -> None:
        attempts[p] = attempts.get(p, 0) + 1
        if attempts[p] == 1:
            self.search.start(p)
        self.runner.submit(p, self.request(p), self._folder(p))

    def run_search(self, console, mode: str) -> tuple[dict[str, Any], bool]:
        view = _ProgressView(self, console, mode)
        with view:
            interrupted = self.search_all(view.event)
        document = self.document(interrupted)
        self.run_dir.save_index(document)
        html = Path(self.args.html) if self.args.html else self.run_dir.path / "fit.html"
        document["html"] = str(write_page(document, html))
        return document, interrupted

    def document(self, interrupted: bool) -> dict[str, Any]:
        rows = report.rows(self.search, self.world_of)
        return {"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "command": self.command, "target": self.job.target.name,
                "device": self.device.name, "device_total_bytes": self.device.total_memory_bytes,
                "space": self.space.describe(), "sort": self.sort,
                "runner": self.runner.description, "run_dir": str(self.run_dir.path),
                "interrupted": interrupted, "counts": report.counts(self.search, rows),
                "frontier": report.frontier(rows, self.sort), "excluded": report.excluded(rows),
                "rows": rows}

    def print(self, document: dict[str, Any], console) -> None:
        names = [a["name"] for a in document["space"]]
        if document["frontier"]:
            console.print(report.frontier_table(document["frontier"], names, self.device.name,
                                                self.device.total_memory_bytes, self.sort))
        else:
            console.print(f"[bold red]No configuration fits on {self.device.name}.[/]")
        if document["excluded"]:
            console.print(report.excluded_table(document["excluded"], names))
        c = document["counts"]
        console.print(f"{c['points']} points: {c['traced']} traced, {c['resumed']} from the run "
                      f"folder, {c['pruned']} pruned, {c['implied']} implied. Run folder: "
                      f"{escape(document['run_dir'])}; page: {escape(document['html'])}",
                      highlight=False)
        if document["interrupted"]:
            console.print("[yellow]interrupted: run the same command again to resume[/]")


class _ProgressView:
    """A live line of the search on a terminal, a line per finished point, or (json) a progress
    record per finished point on stderr, as worker/protocol.py reads them: how many points are
    settled of how many, and what the point found (bytes as integers)."""

    def __init__(self, fit: Fit, console, mode: str):
        self.fit, self.console, self.mode = fit, console, mode
        self.started: dict[Point, float] = {}
        self._status = None

    def __enter__(self):
        if self.mode == "rich":
            self._status = self.console.status("searching", spinner="dots")
            self._status.__enter__()
        self._record(None, None)
        return self

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.__exit__(*exc)

    def event(self, kind: str, point: Point, result) -> None:
        axes = self.fit.space.axes
        if kind == "start":
            self.started[point] = time.time()
        elif kind == "done":
            self._record(point, result)
        if kind in ("done", "retry") and self.mode in ("rich", "lines"):
            took = time.time() - self.started.get(point, time.time())
            self.console.print(escape(f"{point.key(axes)}: {_line(kind, result)} ({took:.0f} s)"),
                               highlight=False)
        if self._status is not None:
            s = self.fit.search
            settled = len(s.outcomes)
            running = ", ".join(p.key(axes) for p in s.running)
            self._status.update(escape(f"{settled}/{len(self.fit.space.points)} settled; tracing "
                                       f"{running or '-'}"))

    def _record(self, point: Point | None, result: dict[str, Any] | None) -> None:
        """`{"event": "progress", "phase": "fit", "settled": n, "points": N, ...}`; the first,
        before any trace, has no point."""
        if self.mode != "json":
            return
        s = self.fit.search
        record: dict[str, Any] = {"event": "progress", "phase": "fit",
                                  "settled": len(s.outcomes),
                                  "points": len(self.fit.space.points)}
        if point is not None and result is not None:
            record["point"] = point.key(self.fit.space.axes)
            record["verdict"] = s.verdict_of(result)
            for key in ("peak_bytes", "headroom_bytes", "worst_rank"):
                if result.get(key) is not None:
                    record[key] = result[key]
        sys.stderr.write(json.dumps(record) + "\n")
        sys.stderr.flush()


def _line(kind: str, result: dict[str, Any]) -> str:
    if kind == "retry":
        return f"worker failed, tracing again: {result['error'].get('message', '')[:200]}"
    if result.get("status") != "ok":
        return f"error: {result['error'].get('message', '').splitlines()[0][:200]}"
    verdict = FITS if result["fits"] else "OOM"
    return (f"{verdict}, peak {format_bytes(result['peak_bytes'])}, headroom "
            f"{format_bytes(result['headroom_bytes'])} on rank {result['worst_rank']}")


