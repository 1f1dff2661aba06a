"""`memlens devices`, `memlens show` and `memlens export`: commands that read, not trace."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import MemlensError

def devices(console) -> int:
    from rich.table import Table

    from ..devices import DEFAULT_DEVICE, all_devices
    from ..units import format_bytes

    table = Table(title="Target devices")
    for col in ("name", "device", "memory", "compute capability", "SMs"):
        table.add_column(col)
    for d in all_devices():
        default = " (default)" if d.name == DEFAULT_DEVICE else ""
        table.add_row(d.name + default, d.display_name, format_bytes(d.total_memory_bytes),
                      f"{d.major}.{d.minor}" if d.type == "cuda" else "-",
                      str(d.sm_count) if d.type == "cuda" else "-")
    console.print(table)
    return 0


def show(args, console) -> int:
    from ..reports.terminal import print_report, summary_json
    from ..snapshot import read_snapshot

    if args.compare and not args.html:
        raise MemlensError("--compare goes with --html (it fills the report's Compare tab)")
    # The whole document is validated, the allocation stream too, although the terminal report
    # reads none of it: a malformed snapshot is an error in every reader (test_snapshot_fuzz).
    snap = read_snapshot(args.snapshot)
    print_report(snap, console, args.snapshot)
    if args.html:
        from ..reports.html import write_html_report

        other = read_snapshot(args.compare) if args.compare else None
        path = write_html_report(snap, args.html, source=Path(args.snapshot).name, compare=other,
                                 compare_source=Path(args.compare).name if args.compare else None)
        console.print(f"HTML report: {path}", highlight=False)
    if args.json:
        print(json.dumps(summary_json(snap, args.snapshot)))
    return 0


def export(args, console) -> int:
    from ..reports.memory_viz import export_memory_viz
    from ..snapshot import read_snapshot

    path = export_memory_viz(read_snapshot(args.snapshot), args.memory_viz)
    console.print(f"wrote {path} (PyTorch memory snapshot: open it at "
                  "https://pytorch.org/memory_viz)", highlight=False)
    return 0
