"""`memlens`: parse the command line, run the subcommand, print an error as one line."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..errors import MemlensError
from .exit_codes import EXIT_ERROR, EXIT_INTERRUPTED
from .inspect_commands import devices, export, show
from .parser import build_parser
from .trace_command import trace

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "fit" in argv[:argv.index("--") if "--" in argv else len(argv)]:
        from ..fit.command import protect_values

        argv = protect_values(argv)
    args = build_parser().parse_args(argv)
    from ..worker.process_tree import adopt_orphans
    from ..reports.terminal import make_console

    adopt_orphans()  # a worker's script leaves no process behind (worker/process_tree.py)

    err = make_console(stderr=True)
    try:
        if args.command == "devices":
            return devices(make_console())
        if args.command == "show":
            return show(args, make_console(stderr=args.json))
        if args.command == "export":
            return export(args, err)
        if args.command == "fit":
            from ..fit.command import run as fit

            return fit(args, make_console(stderr=args.json), err)
        return trace(args, make_console(stderr=args.json or args.progress == "json"), err)
    except MemlensError as e:
        print_error(e, err, args)
        return EXIT_ERROR
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        return EXIT_INTERRUPTED


def print_error(e: MemlensError, console, args) -> None:
    from rich.markup import escape

    where = f"{e.location}: " if e.location else ""
    console.print(f"[bold red]error:[/] {escape(where + e.message)}", highlight=False,
                  soft_wrap=True)
    if e.details:
        console.print(e.details.rstrip(), highlight=False, markup=False)
    if getattr(args, "json", False):
        error: dict[str, Any] = {"message": e.message, "kind": type(e).__name__}
        if e.location:
            error.update(file=e.location.file, line=e.location.line)
        if e.details:
            error["traceback"] = e.details
        print(json.dumps({"error": error}))
    if getattr(args, "debug", False):
        import traceback

        traceback.print_exception(e)
