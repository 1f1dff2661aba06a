"""What a user reads in the terminal: tables made from a snapshot (the same for `memlens run`,
`memlens trace` and `memlens show`), and the one-object JSON summary for `--json`."""

from __future__ import annotations

import os
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from . import categories as C
from .units import format_bytes

TOP_MODULES = 12
TOP_LINES = 10


def summary_json(snap: dict[str, Any], snapshot_path: str | None) -> dict[str, Any]:
    meta, summary = snap["meta"], snap["summary"]
    return {
        "peak_bytes": summary["peak_bytes"],
        "peak_phase": summary["peak_phase"],
        "device": meta["device"]["name"],
        "device_total_bytes": meta["device"]["total_memory_bytes"],
        "device_key": meta["device_key"],
        "world_size": meta.get("world_size", 1), "rank": meta.get("rank", 0),
        "parallel": meta.get("parallel", {}),
        "categories_at_peak": summary["categories_at_peak"],
        "category_peaks": summary["category_peaks"],
        "phases": [{k: p[k] for k in ("name", "device", "current_before_bytes",
                                       "current_after_bytes", "peak_bytes")}
                   for p in snap["phases"]],
        "modules": [{"fqn": m["fqn"], "class": m["class"],
                     **{k: m[k] for k in ("parameter_bytes", "buffer_bytes", "gradient_bytes",
                                          "optimizer_state_bytes", "activation_bytes")}}
                    for m in snap["modules"]],
        "placeholders": summary.get("placeholders", []),
        "snapshot": snapshot_path,
    }


_GROUP_FIELDS = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes", "activation_bytes")


def module_groups(modules: list[dict[str, Any]], max_depth: int = 3) -> list[dict[str, Any]]:
    """Modules merged by group key ('h.*.attn' for h.0.attn ... h.11.attn), totals over the
    instances, largest first. Containers whose bytes all sit in one shown child are skipped."""
    groups: dict[str, dict[str, Any]] = {}
    for m in modules:
        if not m["fqn"] or m["fqn"].count(".") >= max_depth:
            continue
        g = groups.setdefault(m["group"], {"group": m["group"], "class": m["class"], "count": 0,
                                           "at_peak": 0, **{f: 0 for f in _GROUP_FIELDS}})
        g["count"] += 1
        g["at_peak"] += sum(m["at_peak"].values())
        for f in _GROUP_FIELDS:
            g[f] += m[f]
        if g["class"] != m["class"]:
            g["class"] = "(mixed)"
    out = [g for g in groups.values() if g["at_peak"] or g["parameter_bytes"]]
    # A container such as ModuleList adds nothing that its merged children do not show.
    shown = {g["group"] for g in out}
    out = [g for g in out if not (g["class"] in ("ModuleList", "ModuleDict", "Sequential")
                                  and f"{g['group']}.*" in shown)]
    return sorted(out, key=lambda g: -g["at_peak"])


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("../..") else path


def print_report_to_terminal(snap: dict[str, Any], snapshot_path: str | None = None) -> None:
    print_report(snap, Console(), snapshot_path)


def print_report(snap: dict[str, Any], console: Console, snapshot_path: str | None = None) -> None:
    meta, summary = snap["meta"], snap["summary"]
    device = meta["device"]
    total = device["total_memory_bytes"]
    key = meta["device_key"]
    peak = summary["peak_bytes"]
    target = meta.get("target", {})
    console.print(f"[bold]memlens[/] {target.get('kind', '')} [cyan]{target.get('name', '')}[/] on "
                  f"[bold]{device['name']}[/] ({device.get('display_name', '')}, "
                  f"{format_bytes(total)}), {meta['iterations']} iterations")

    phases = Table(title="Phases", box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("phase", "device", "before", "peak", "after"):
        phases.add_column(col, justify="left" if col in ("phase", "device") else "right")
    for p in snap["phases"]:
        style = "bold red" if p["device"] == key and p["name"] == summary["peak_phase"] else None
        phases.add_row(p["name"], p["device"], format_bytes(p["current_before_bytes"]),
                       format_bytes(p["peak_bytes"]), format_bytes(p["current_after_bytes"]),
                       style=style)
    console.print(phases)

    cats = Table(title=f"At the peak: {format_bytes(peak)} in {summary['peak_phase']}",
                 box=box.SIMPLE_HEAVY, title_justify="left")
    cats.add_column("category")
    cats.add_column("at peak", justify="right")
    cats.add_column("share", justify="right")
    cats.add_column("own peak", justify="right")
    for i, name in enumerate(C.NAMES):
        at = summary["categories_at_peak"][name]
        own = summary["category_peaks"][name]
        if at or own:
            cats.add_row(C.LABELS[i], format_bytes(at), f"{100 * at / peak:.1f}%" if peak else "-",
                         format_bytes(own))
    console.print(cats)

    groups = module_groups(snap["modules"])
    if groups:
        table = Table(title="Top modules (bytes held at the peak; repeated layers merged)",
                      box=box.SIMPLE_HEAVY, title_justify="left")
        for col in ("module", "class", "×", "at peak", "params", "grads", "optim", "activ."):
            table.add_column(col, justify="left" if col in ("module", "class") else "right")
        for g in groups[:TOP_MODULES]:
            table.add_row(g["group"], g["class"], str(g["count"]), format_bytes(g["at_peak"]),
                          format_bytes(g["parameter_bytes"]), format_bytes(g["gradient_bytes"]),
                          format_bytes(g["optimizer_state_bytes"]),
                          format_bytes(g["activation_bytes"]))
        console.print(table)

    lines = [ln for ln in snap["lines"] if ln["bytes_at_peak"]][:TOP_LINES]
    if lines:
        table = Table(title="Top source lines (bytes alive at the peak)", box=box.SIMPLE_HEAVY,
                      title_justify="left")
        table.add_column("line")
        table.add_column("at peak", justify="right")
        table.add_column("allocated in total", justify="right")
        for ln in lines:
            table.add_row(f"{_short(ln['file'])}:{ln['line']}", format_bytes(ln["bytes_at_peak"]),
                          format_bytes(ln["total_bytes"]))
        console.print(table)

    for ph in summary.get("placeholders", [])[:5]:
        console.print(f"[yellow]note:[/] {ph['file']}:{ph['line']} read a tensor value "
                      f"({ph['op']}); the trace answered {ph['value']!r}")
    verdict = "fits" if peak <= total else "does NOT fit"
    color = "green" if peak <= total else "red"
    console.print(f"Peak [bold]{format_bytes(peak)}[/] of {format_bytes(total)} on {device['name']}: "
                  f"[{color}]{verdict}[/]" + (f", {format_bytes(total - peak)} headroom"
                                               if peak <= total else
                                               f", over by {format_bytes(peak - total)}"))
    if snapshot_path:
        console.print(f"Snapshot: {_short(snapshot_path)}")
