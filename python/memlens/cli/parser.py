"""The argument parser of `memlens` (its subcommands and their options)."""

from __future__ import annotations

import argparse

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memlens", description="How much device memory one training "
                                "step needs, and where the bytes go.")
    p.add_argument("--debug", action="store_true", help="show memlens' own tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    def trace_options(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--device", default=None, help="target device (see `memlens devices`); "
                        "default h100-80gb")
        sp.add_argument("--iterations", type=int, default=None,
                        help="training iterations to trace (default 2)")
        sp.add_argument("--snapshot", default=None,
                        help="where to write the snapshot (default "
                        ".memlens/<kind>-<target>-<hash>/<time>.json)")
        sp.add_argument("--no-snapshot", action="store_true", help="do not write a snapshot")
        sp.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout (tables go to stderr)")
        sp.add_argument("--progress", choices=("auto", "rich", "json", "none"), default="auto")
        # The language server's worker: the --json summary carries the snapshot's digest.
        sp.add_argument("--with-digest", action="store_true", help=argparse.SUPPRESS)
        sp.add_argument("--dynamic-sizes", type=_dynamic_sizes, default=None, metavar="POLICY",
                        help="size of results that depend on tensor values (x[mask], "
                        "nonzero, unique): bound (the default: their upper bound), a fraction "
                        "of the bound such as 0.5, or error")
        sp.add_argument("--sdpa-backend", choices=("flash", "efficient", "cudnn", "math"),
                        default=None, help="the attention kernel F.scaled_dot_product_attention "
                        "runs on where it can take the inputs (default: the one torch picks on "
                        "the device: cuDNN first on sm90/sm10x, flash elsewhere)")
        sp.add_argument("--no-layer-replay", action="store_true",
                        help="trace every block of a model; by default identical blocks after "
                        "the first two are replayed from a recording, with the same snapshot "
                        "(a replay found wrong traces again without it)")
        sp.add_argument("--max-allocations", type=int, default=None,
                        help="keep the full allocation stream in the snapshot up to this many "
                        "allocations (default 1,000,000)")

    run = sub.add_parser("run", help="trace an unmodified training script")
    trace_options(run)
    _distributed_options(run)
    run.add_argument("script", nargs=argparse.REMAINDER,
                     help="-- script.py [ARGS...] (or -m module [ARGS...])")

    tr = sub.add_parser("trace", help="trace a model definition with a recipe")
    tr.add_argument("target", help="path/to/file.py:ClassOrFactory")
    trace_options(tr)
    tr.add_argument("--recipe", default=None, help="recipe file (default: nearest memlens.toml "
                    "or pyproject.toml with [tool.memlens])")
    tr.add_argument("--batch", type=int, default=None, help="micro-batch size")
    tr.add_argument("--precision", default=None,
                    help="fp32, bf16, fp16, autocast-bf16 or autocast-fp16")
    tr.add_argument("--optimizer", default=None, help="adamw, adam, sgd or none")
    tr.add_argument("--loss", default=None, help="sum, mean or output.<attribute>")

    show = sub.add_parser("show", help="print the tables of a saved snapshot")
    show.add_argument("snapshot")
    show.add_argument("--json", action="store_true", help="print the JSON summary")
    show.add_argument("--html", metavar="PATH", default=None,
                      help="also write a self-contained HTML report (the panel's views, offline)")
    show.add_argument("--compare", metavar="OTHER", default=None,
                      help="with --html: a second snapshot for the report's Compare tab")

    export = sub.add_parser("export", help="convert a snapshot for other tools")
    export.add_argument("snapshot")
    export.add_argument("--memory-viz", required=True, metavar="OUT.pickle",
                        help="write PyTorch's memory snapshot pickle (open it at "
                        "pytorch.org/memory_viz or with python -m torch.cuda._memory_viz)")

    from ..fit.command import add_parser as add_fit_parser

    add_fit_parser(sub)
    sub.add_parser("devices", help="list the target devices")
    return p


def _distributed_options(run: argparse.ArgumentParser) -> None:
    g = run.add_argument_group("distributed jobs (each rank is simulated in one process)")
    g.add_argument("--world-size", type=int, default=None,
                   help="processes in the job (default: what the launch line says)")
    g.add_argument("--nproc-per-node", type=int, default=None,
                   help="processes per node (default: the launch line's, else 8 per node)")
    g.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="a single process (no --world-size) sees N GPUs, cuda:0 to cuda:N-1 "
                   "(torch.nn.DataParallel); default 1")
    rank = g.add_mutually_exclusive_group()
    rank.add_argument("--rank", type=int, default=None, help="the rank to trace (default 0)")
    rank.add_argument("--ranks", choices=("all", "every"), default=None,
                      help="all: trace one rank of each role, in parallel; every: trace every "
                      "rank, alike or not (to check the grouping, or time it)")
    g.add_argument("--jobs", type=int, default=None,
                   help="parallel workers for --ranks all (default: the number of cores)")
    g.add_argument("--launch", default=None, metavar="FILE:NAME",
                   help="a configuration of .vscode/launch.json, e.g. .vscode/launch.json:Train")
    g.add_argument("--from-script", default=None, metavar="FILE[:LINE]",
                   help="the launch command (torchrun, python -m torch.distributed.run, "
                   "accelerate launch, python train.py) a shell script runs: the script is run "
                   "by bash with recording launchers, its other commands run too; what follows "
                   "`--` is the script's own arguments")
    # --ranks all: each rank's worker reads the job the parent recorded (not run again).
    g.add_argument("--recorded-job", default=None, help=argparse.SUPPRESS)


def _dynamic_sizes(text: str) -> str:
    from ..engine.dynamic_sizes import parse_policy

    try:
        return parse_policy(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
