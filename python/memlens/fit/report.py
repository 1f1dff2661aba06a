"""What a search found: one row per point, the frontier (the points that fit) sorted by the
user's key, the excluded points with the reason each does not fit, as tables and as JSON."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from ..units import format_bytes
from .search import ERROR, FITS, OOM, Search
from .space import RECOMPUTE

SORT_KEYS = ("gpus", "micro-batch", "recompute", "peak")


def rows(search: Search, world_of) -> list[dict[str, Any]]:
    """`world_of(point)`: the point's number of GPUs."""
    axes = search.space.axes
    out = []
    for p in search.space.points:
        o = search.outcomes.get(p)
        row: dict[str, Any] = {"key": p.key(axes),
                               "point": {a.name: v for a, v in zip(axes, p.values)},
                               "gpus": world_of(p),
                               "folder": p.folder(axes)}  # under RUN_DIR/points/
        if o is None:
            out.append({**row, "verdict": None, "source": "not traced",
                        "reason": "not traced: the search was interrupted"})
            continue
        source = ("resumed" if o.resumed else "traced") if o.traced else (
            "pruned" if o.verdict == OOM else "implied")
        row.update(verdict=o.verdict, source=source, by=o.by.key(axes) if o.by else None)
        if o.result is not None:
            row.update({k: v for k, v in o.result.items() if k not in ("status", "retry")})
        row["reason"] = _reason(row, search, o)
        out.append(row)
    return out


def _reason(row: dict[str, Any], search: Search, o) -> str:
    if o.verdict == ERROR:
        e = o.result.get("error", {})
        where = f"{e['file']}:{e['line']}: " if e.get("file") else ""
        message = (e.get("message") or "").splitlines()[0][:300]
        if e.get("kind") in ("WorkerFailed", "RayTaskFailed"):
            tries = o.result.get("attempts", 1)
            return f"the trace failed ({tries} tries): {message}"
        return f"the script's error: {where}{message}"
    if o.verdict == OOM and o.traced:
        over = format_bytes(-o.result["headroom_bytes"])
        text = f"OOM by {over} on rank {o.result['worst_rank']}"
        oom = o.result.get("oom")
        if oom:
            at = f", {oom['file'].rsplit('/', 1)[-1]}:{oom['line']}" if oom.get("file") else ""
            text += f" (at op {oom['op']} in {oom['phase']}{at})"
        return text + " (traced)"
    by = search.outcomes[o.by].result if o.by is not None else None
    if o.verdict == OOM:
        return (f"OOM: pruned, needs at least as much as {row['by']}, which is OOM by "
                f"{format_bytes(-by['headroom_bytes'])}")
    if not o.traced:
        return f"fits: needs at most as much as {row['by']} (not traced)"
    return f"fits with {format_bytes(o.result['headroom_bytes'])} headroom"


def _sort_value(row: dict[str, Any], key: str):
    point = row["point"]
    if key == "gpus":
        return row["gpus"] or 1
    if key == "micro-batch":
        return -int(point["micro-batch"]) if "micro-batch" in point else 0
    if key == "recompute":
        return RECOMPUTE.index(point["recompute"]) if point.get("recompute") in RECOMPUTE else 0
    peak = row.get("peak_bytes")
    return (peak is None, peak or 0)  # settled without a trace: after the traced ones


def frontier(all_rows: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    order = [sort] + [k for k in SORT_KEYS if k != sort]
    fits = [r for r in all_rows if r["verdict"] == FITS]
    return sorted(fits, key=lambda r: tuple(_sort_value(r, k) for k in order))


def excluded(all_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in all_rows if r["verdict"] != FITS]


def counts(search: Search, all_rows: list[dict[str, Any]]) -> dict[str, int]:
    by_source = {s: sum(1 for r in all_rows if r["source"] == s)
                 for s in ("traced", "resumed", "pruned", "implied", "not traced")}
    return {"points": len(all_rows), **by_source,
            "fits": sum(1 for r in all_rows if r["verdict"] == FITS),
            "oom": sum(1 for r in all_rows if r["verdict"] == OOM),
            "errors": sum(1 for r in all_rows if r["verdict"] == ERROR)}


def frontier_table(front: list[dict[str, Any]], axis_names: list[str], device: str,
                   total: int, sort: str) -> Table:
    table = Table(title=f"Fits on {device} ({format_bytes(total)}), by {sort}",
                  box=box.SIMPLE_HEAVY, title_justify="left")
    for name in axis_names:
        table.add_column(name)
    for col in ("worst rank", "peak", "reserved", "headroom", "traced"):
        table.add_column(col, justify="right" if col != "traced" else "left")
    for r in front:
        cells = [escape(r["point"][n]) for n in axis_names]
        if r.get("peak_bytes") is None:
            cells += ["-", "-", "-", "-", escape(f"≤ {r['by']}")]
        else:
            reserved = r.get("reserved_peak_bytes")
            cells += [str(r["worst_rank"]), format_bytes(r["peak_bytes"]),
                      format_bytes(reserved) if reserved is not None else "-",
                      format_bytes(r["headroom_bytes"]), r["source"]]
        table.add_row(*cells)
    return table


def excluded_table(rest: list[dict[str, Any]], axis_names: list[str]) -> Table:
    table = Table(title="Does not fit", box=box.SIMPLE_HEAVY, title_justify="left")
    for name in axis_names:
        table.add_column(name)
    table.add_column("why")
    for r in rest:
        style = "red" if r["verdict"] == OOM else ("yellow" if r["verdict"] == ERROR else "dim")
        table.add_row(*[escape(r["point"][n]) for n in axis_names], escape(r["reason"]),
                      style=style)
    return table
