"""What a user reads in the terminal: tables made from a snapshot (the same for `memlens run`,
`memlens trace` and `memlens show`), and the one-object JSON summary for `--json`."""

from __future__ import annotations

import os
import re
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import categories as C
from ..units import format_bytes

TOP_MODULES = 12
MAX_PLACEHOLDER_NOTES = 20  # one note per line that read a value; the rest are counted
TOP_LINES = 10
LOG_WIDTH = 240  # columns of a report written to a file or a pipe


def make_console(stderr: bool = False) -> Console:
    """A console that fits the terminal, or, writing to a file or a pipe (`2>log`), where
    rich would assume 80 columns and cut module names, prints tables at their natural width
    (up to LOG_WIDTH). COLUMNS, where set, wins."""
    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console.width = LOG_WIDTH
    return console


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
        "iterations": meta["iterations"],
        "iterations_traced": meta.get("iterations_traced", meta["iterations"]),
        "iteration_unit": meta.get("iteration_unit"),
        "interrupted": meta.get("interrupted", False),
        "categories_at_peak": summary["categories_at_peak"],
        "category_peaks": summary["category_peaks"],
        **({"subcategories": summary["subcategories"]} if "subcategories" in summary else {}),
        "phases": [{k: p[k] for k in ("name", "device", "current_before_bytes",
                                       "current_after_bytes", "peak_bytes",
                                       "reserved_peak_bytes") if k in p}
                   for p in snap["phases"]],
        "modules": [{"fqn": m["fqn"], "class": m["class"],
                     **{k: m[k] for k in ("parameter_bytes", "buffer_bytes", "gradient_bytes",
                                          "optimizer_state_bytes", "activation_bytes")}}
                    for m in snap["modules"]],
        "placeholders": summary.get("placeholders", []),
        "notes": meta.get("notes", []),
        "compiled_regions": meta.get("compiled_regions", []),
        # Reserved memory and the verdict (null where the snapshot predates them or, for
        # reserved and outside, on a CPU target).
        **{k: summary.get(k) for k in VERDICT_FIELDS},
        "snapshot": snapshot_path,
    }


def compiled_region_line(region: dict) -> str:
    """compiled: model.py:40 torch.compile(GPT) by Inductor, 2 graphs, 1 break, saved for
    backward 1.5 MiB (eager 2.0 MiB)."""
    graphs, breaks = region["graphs"], region["graph_breaks"]
    return (f"compiled: {_short(region['place'])} {region['call']} as "
            f"{region['compiled_as']}, {graphs} graph{'s' * (graphs != 1)}, {breaks} "
            f"break{'s' * (breaks != 1)}, saved for backward {format_bytes(region['saved_bytes'])}"
            f" (eager {format_bytes(region['eager_saved_bytes'])})"
            + (f"; eager because {region['eager_because']}" if region.get("eager_because") else ""))


VERDICT_FIELDS = ("reserved_peak_bytes", "reserved_peak_phase", "fragmentation_bytes",
                  "segments_at_reserved_peak", "outside_allocator", "outside_allocator_bytes",
                  "fits", "headroom_bytes", "oom")


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
    print_report(snap, make_console(), snapshot_path)


def print_report(snap: dict[str, Any], console: Console, snapshot_path: str | None = None) -> None:
    snap = display_safe(snap)
    meta, summary = snap["meta"], snap["summary"]
    device = meta["device"]
    total = device["total_memory_bytes"]
    peak = summary["peak_bytes"]
    target = meta.get("target", {})
    console.print(f"[bold]memlens[/] {target.get('kind', '')} [cyan]{target.get('name', '')}[/] on "
                  f"[bold]{device['name']}[/] ({device.get('display_name', '')}, "
                  f"{format_bytes(total)}), {escape(iterations_line(meta))}")

    console.print(_phase_table(snap))

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
        for sub in summary.get("subcategories", ()):  # "of which", under its category
            if sub["category"] == name:
                at = sub["at_peak_bytes"]
                cats.add_row(f"  of which {escape(sub['label'])}", format_bytes(at),
                             f"{100 * at / peak:.1f}%" if peak else "-",
                             format_bytes(sub["peak_bytes"]))
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

    placeholders = summary.get("placeholders", [])
    for ph in placeholders[:MAX_PLACEHOLDER_NOTES]:
        where = _short(ph["file"]) if ph["file"] else "?"
        text = (f"{where}:{ph['line']} read a tensor value ({ph['op']}); "
                f"the trace answered {ph['value']!r}")
        console.print(f"[yellow]note:[/] {text}", highlight=False)
    if len(placeholders) > MAX_PLACEHOLDER_NOTES:
        console.print(f"[yellow]note:[/] {len(placeholders) - MAX_PLACEHOLDER_NOTES} more lines "
                      "read tensor values (the snapshot lists them all)", highlight=False)
    for text in meta.get("notes", []):  # what an integration changed about the run
        console.print(f"[yellow]note:[/] {text}", highlight=False)
    for region in meta.get("compiled_regions", []):
        console.print(compiled_region_line(region), highlight=False)
    if summary.get("reserved_peak_bytes") is not None:
        print_device_memory(snap, console)
    else:
        verdict = "fits" if peak <= total else "does NOT fit"
        color = "green" if peak <= total else "red"
        console.print(f"Peak [bold]{format_bytes(peak)}[/] of {format_bytes(total)} on "
                      f"{device['name']}: [{color}]{verdict}[/]"
                      + (f", {format_bytes(total - peak)} headroom" if peak <= total else
                         f", over by {format_bytes(peak - total)}"))
    if snapshot_path:
        console.print(f"Snapshot: {_short(snapshot_path)}")


def iterations_line(meta: dict[str, Any]) -> str:
    """'2 iterations (optimizer steps)': what was traced and counted, never only what was
    asked for."""
    requested = meta["iterations"]
    traced = meta.get("iterations_traced", requested)  # older snapshots: the request
    text = f"{traced} iteration{'' if traced == 1 else 's'}"
    unit = meta.get("iteration_unit")
    why = []
    if meta.get("interrupted"):
        why.append(f"interrupted; {requested} requested")
    elif traced < requested and "iterations_traced" in meta:
        why.append(f"the script ended; {requested} requested")
    details = "; ".join(([unit] if unit else []) + why)
    return f"{text} ({details})" if details else text


def _phase_table(snap: dict[str, Any]) -> Table:
    """Allocated before / peak / after per phase, and the reserved peak where a caching
    allocator was modelled."""
    key, peak_phase = snap["meta"]["device_key"], snap["summary"]["peak_phase"]
    reserved = any("reserved_peak_bytes" in p for p in snap["phases"])
    table = Table(title="Phases (allocated" + ("; reserved: the caching allocator's peak)"
                                               if reserved else ")"),
                  box=box.SIMPLE_HEAVY, title_justify="left", padding=(0, 1), pad_edge=False)
    columns = ("phase", "device", "before", "peak", "after") + (("reserved",)
                                                                  if reserved else ())
    longest = max((len(p["name"]) for p in snap["phases"]), default=5)
    for col in columns:
        table.add_column(col, justify="left" if col in ("phase", "device") else "right",
                         min_width=longest if col == "phase" else None)
    # Rows of another device (the host, for a CUDA target) only where it held something.
    for p in snap["phases"]:
        if p["device"] != key and not (p["peak_bytes"] or p["current_before_bytes"]):
            continue
        style = "bold red" if p["device"] == key and p["name"] == peak_phase else None
        row = [p["name"], p["device"], format_bytes(p["current_before_bytes"]),
               format_bytes(p["peak_bytes"]), format_bytes(p["current_after_bytes"])]
        if reserved:
            row.append(format_bytes(p["reserved_peak_bytes"]) if "reserved_peak_bytes" in p
                       else "-")
        table.add_row(*row, style=style)
    return table


def print_device_memory(snap: dict[str, Any], console: Console) -> None:
    """Per device: allocated and reserved peaks, fragmentation, segments; the line items
    outside the allocator; then the verdict."""
    summary, device = snap["summary"], snap["meta"]["device"]
    total = format_bytes(device["total_memory_bytes"])
    table = Table(title=f"Device memory ({device['name']}, {total})", box=box.SIMPLE_HEAVY,
                  title_justify="left")
    for col in ("device", "allocated peak", "reserved peak", "fragmentation", "segments"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for name, d in summary.get("devices", {}).items():
        if "reserved_peak_bytes" in d:
            table.add_row(name, format_bytes(d["peak_bytes"]),
                          format_bytes(d["reserved_peak_bytes"]),
                          _bytes_or_dash(d.get("fragmentation_bytes")),
                          str(d.get("segments_at_reserved_peak", "-")))
    console.print(table)
    _print_graph_pools(summary, console)
    items = summary.get("outside_allocator") or []
    if items:
        table = Table(title="Next to the allocator's memory", box=box.SIMPLE_HEAVY,
                      title_justify="left", padding=(0, 1), pad_edge=False)
        for col in ("item", "bytes", "counted", "basis"):
            table.add_column(col, justify="right" if col == "bytes" else "left")
        for item in items:
            table.add_row(item["label"], format_bytes(item["bytes"]),
                          "in reserved" if item["counted_by_allocator"] else "outside",
                          item.get("short_basis") or item["basis"])
        console.print(table)
    console.print(verdict_line(snap), highlight=False)
    oom = summary.get("oom")
    if oom:
        console.print(f"  PyTorch would raise: {oom['message']}", style="red", highlight=False)


def _print_graph_pools(summary: dict[str, Any], console: Console) -> None:
    """Private pools, CUDA graphs' and MemPools': reserved for as long as a graph or the
    MemPool using them lives."""
    rows = [(name, pool) for name, d in summary.get("devices", {}).items()
            for pool in d.get("graph_pools", ())]
    if not rows:
        return
    table = Table(title="Private pools: CUDA graphs' and MemPools' (inside reserved; held while "
                        "a graph or MemPool using them lives)",
                  box=box.SIMPLE_HEAVY, title_justify="left")
    for col in ("device", "pool", "reserved peak", "at the end", "replays", "captured at"):
        table.add_column(col, justify="right" if col in ("reserved peak", "at the end",
                                                         "replays") else "left")
    for device, pool in rows:
        places = sorted(set(pool["graphs"]), key=pool["graphs"].index)
        where = ", ".join(_short(p) for p in places)
        captures = len(pool["graphs"])
        table.add_row(device, pool["name"], format_bytes(pool["reserved_peak_bytes"]),
                      format_bytes(pool["reserved_final_bytes"]), str(pool.get("replays", 0)),
                      where + (f" ({captures} graphs)" if captures > 1 else ""))
    console.print(table)


def _bytes_or_dash(n: int | None) -> str:
    return "-" if n is None else format_bytes(n)


# What of a snapshot the report prints; the rest (tensors, frames, allocations) it does not.
_PRINTED_PARTS = ("meta", "summary", "phases", "modules", "lines")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_SHOWN_CHARS = 300  # a string longer than this is cut (a 100 KB name would take minutes)


def _safe_text(text: str) -> str:
    """A snapshot string as the terminal gets it: control characters (ESC, OSC 8 hyperlinks,
    cursor moves) removed, cut to MAX_SHOWN_CHARS, rich markup escaped."""
    text = _CONTROL.sub("", text)
    if len(text) > MAX_SHOWN_CHARS:
        text = text[:MAX_SHOWN_CHARS - 1] + "…"
    return escape(text)


def _safe(value: Any) -> Any:
    if isinstance(value, str):
        return _safe_text(value)
    if isinstance(value, dict):
        return {_safe(k) if isinstance(k, str) else k: _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return value


def display_safe(snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with every string the report prints made safe (a snapshot is untrusted
    input): the tables print them as rich markup."""
    return {**snap, **{part: _safe(snap[part]) for part in _PRINTED_PARTS if part in snap}}


def verdict_line(snap: dict[str, Any]) -> str:
    """'Fits: ...' or 'OUT OF MEMORY at op X in phase Y, file:line (...)' (rich markup)."""
    summary = snap["summary"]
    total = snap["meta"]["device"]["total_memory_bytes"]
    reserved = summary["reserved_peak_bytes"]
    outside = summary.get("outside_allocator_bytes") or 0  # null: none was estimated
    if summary.get("oom"):
        return _oom_line(summary["oom"], outside, total)
    used = reserved + outside
    text = (f"peak reserved {format_bytes(reserved)} + outside {format_bytes(outside)} = "
            f"{format_bytes(used)} of {format_bytes(total)}")
    # The snapshot's headroom (device_memory.py), the one number every view shows.
    headroom = summary.get("headroom_bytes", total - used)
    if summary.get("fits"):
        return f"[bold green]Fits:[/] {text} ({format_bytes(headroom)} headroom)"
    return f"[bold red]DOES NOT FIT:[/] {text} (over by {format_bytes(-headroom)})"


def _oom_line(oom: dict[str, Any], outside: int, total: int) -> str:
    where = f", {os.path.basename(oom['file'])}:{oom['line']}" if oom.get("file") else ""
    tried = oom.get("tried_to_allocate_bytes", oom["requested_bytes"])
    state = (f"{format_bytes(oom.get('allocated_bytes', 0))} allocated and "
             f"{format_bytes(oom.get('reserved_bytes', 0))} reserved by PyTorch, "
             f"{format_bytes(oom.get('free_bytes', 0))} free on {oom['device']}")
    needed = oom.get("reserved_needed_bytes")
    need = (f" The step needs {format_bytes(needed)} reserved + {format_bytes(outside)} "
            f"outside = {format_bytes(needed + outside)} of {format_bytes(total)}."
            if needed is not None else "")
    return (f"[bold red]OUT OF MEMORY at op {oom['op']} in phase {oom['phase']}{where}[/] "
            f"(tried to allocate {format_bytes(tried)}; {state}).{need}")
