"""Which point to trace next, and what each traced point tells about the others.

What is known prunes (space.py's order of memory):
- a point that is out of memory puts every point that needs at least as much out of memory
  (a larger micro-batch at equal other settings, less recompute, fewer GPUs ...): those are not
  traced, and are reported as pruned from it;
- a point that fits makes every point that needs at most as much fit: those are not traced
  either (`all_fits` traces them anyway, for their own numbers);
- a script error tells nothing about the others.

The bisected axis (Space.primary, micro-batch where it varies) splits the space into lines (all
other values equal). Each line is bisected: its middle unknown point is traced, and the half
that result decides is settled without tracing. Lines are taken from the least memory-hungry,
whose out-of-memory points prune the hungrier lines. One point per line is traced at a time,
so workers run different lines in parallel and never trace what a running trace may prune.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .space import Point, Space

FITS, OOM, ERROR = "fits", "oom", "error"


@dataclass
class Outcome:
    verdict: str  # FITS, OOM or ERROR
    traced: bool  # False: settled from another point (`by`) without a trace
    by: Point | None = None
    result: dict[str, Any] | None = None  # the trace's result (trace_point.py), when traced
    resumed: bool = False  # traced by an earlier run of the same search (the run folder)


@dataclass
class Search:
    space: Space
    prune: bool = True
    all_fits: bool = False
    outcomes: dict[Point, Outcome] = field(default_factory=dict)
    running: set[Point] = field(default_factory=set)

    def verdict_of(self, result: dict[str, Any]) -> str:
        if result.get("status") != "ok":
            return ERROR
        return FITS if result["fits"] else OOM

    def record(self, point: Point, result: dict[str, Any], resumed: bool = False) -> None:
        """A finished trace: its outcome, and what it settles."""
        self.running.discard(point)
        verdict = self.verdict_of(result)
        self.outcomes[point] = Outcome(verdict, True, None, result, resumed)
        if not self.prune or verdict == ERROR:
            return
        for other in self.space.points:
            if other == point or other in self.running:
                continue
            known = self.outcomes.get(other)
            if known is not None and (known.traced or known.verdict == verdict):
                continue
            if verdict == OOM and self.space.at_most(point, other):
                self.outcomes[other] = Outcome(OOM, False, point)
            elif verdict == FITS and not self.all_fits and self.space.at_most(other, point):
                self.outcomes[other] = Outcome(FITS, False, point)

    def _open(self) -> list[Point]:
        """Points still to trace: unknown, or (with all_fits) known to fit but not traced."""
        def wanted(p: Point) -> bool:
            o = self.outcomes.get(p)
            return o is None or (self.all_fits and not o.traced and o.verdict == FITS)
        return [p for p in self.space.points if p not in self.running and wanted(p)]

    def next_point(self) -> Point | None:
        """The next point to trace, or None while the running traces must be waited for (or
        when the search is done)."""
        open_points = self._open()
        if not open_points:
            return None
        primary = self.space.primary()
        if not self.prune or primary is None:
            return open_points[0]
        lines: dict[tuple, list[Point]] = {}
        for p in open_points:
            lines.setdefault(_line_key(p, primary), []).append(p)
        busy = {_line_key(p, primary) for p in self.running}
        free = [key for key in lines if key not in busy]
        if not free:
            return None
        axis = self.space.axes[primary]
        key = min(free, key=lambda k: (self._hunger(lines[k][0], primary),
                                       self.space.points.index(lines[k][0])))
        line = sorted(lines[key], key=lambda p: axis.rank(p.values[primary]))
        return line[(len(line) - 1) // 2]

    def _hunger(self, point: Point, primary: int) -> float:
        """How memory-hungry a line is by its other monotone values (lower first)."""
        total = 0.0
        for i, axis in enumerate(self.space.axes):
            if i == primary or axis.direction == "none":
                continue
            ranks = sorted(axis.rank(v) for v in axis.values)
            total += ranks.index(axis.rank(point.values[i]))
        return total

    def start(self, point: Point) -> None:
        self.running.add(point)

    def abandon(self, point: Point) -> None:
        """A trace that will not report (interrupted): its point is open again."""
        self.running.discard(point)

    def done(self) -> bool:
        return not self.running and not self._open()

    def traced_count(self) -> int:
        return sum(1 for o in self.outcomes.values() if o.traced and not o.resumed)


def _line_key(point: Point, primary: int) -> tuple:
    return point.values[:primary] + point.values[primary + 1:]
