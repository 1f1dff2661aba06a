"""The `memlens` command line.

    memlens run [--device NAME] [--iterations K] [--snapshot PATH] [--json] -- script.py [ARGS...]
    memlens run --world-size 64 --rank 0 -- train.py ARGS        # one simulated rank
    memlens run --world-size 64 --ranks all -- train.py ARGS     # every distinct rank
    memlens run --launch .vscode/launch.json:"Train 8B" [--ranks all]
    memlens run --from-script scripts/train_llama.sh[:LINE] [--ranks all] [-- SCRIPT ARGS]
    memlens trace path/to/file.py:ClassOrFactory [--device NAME] [...]
    memlens show SNAPSHOT [--json] [--html REPORT.html [--compare OTHER]]
    memlens export SNAPSHOT --memory-viz out.pickle
    memlens devices

torch is imported only once the command needs it: a CUDA target on a CPU-only torch build must
load the fake-CUDA library before torch is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from .errors import DataDependentError, MemlensError

EXIT_USAGE, EXIT_ERROR, EXIT_INTERRUPTED = 2, 1, 130


def _parser() -> argparse.ArgumentParser:
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

    sub.add_parser("devices", help="list the target devices")
    return p


def _distributed_options(run: argparse.ArgumentParser) -> None:
    g = run.add_argument_group("distributed jobs (each rank is simulated in one process)")
    g.add_argument("--world-size", type=int, default=None,
                   help="processes in the job (default: what the launch line says)")
    g.add_argument("--nproc-per-node", type=int, default=None,
                   help="processes per node (default: the launch line's, else 8 per node)")
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .process_tree import adopt_orphans
    from .reports.terminal import make_console

    adopt_orphans()  # a worker's script leaves no process behind (process_tree.py)

    err = make_console(stderr=True)
    try:
        if args.command == "devices":
            return _devices(make_console())
        if args.command == "show":
            return _show(args, make_console(stderr=args.json))
        if args.command == "export":
            return _export(args, err)
        return _trace(args, make_console(stderr=args.json or args.progress == "json"), err)
    except MemlensError as e:
        _print_error(e, err, args)
        return EXIT_ERROR
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        return EXIT_INTERRUPTED


def _print_error(e: MemlensError, console, args) -> None:
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


def _devices(console) -> int:
    from rich.table import Table

    from .devices import DEFAULT_DEVICE, all_devices
    from .units import format_bytes

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


def _show(args, console) -> int:
    from .reports.terminal import print_report, summary_json
    from .snapshot import read_snapshot

    if args.compare and not args.html:
        raise MemlensError("--compare goes with --html (it fills the report's Compare tab)")
    snap = read_snapshot(args.snapshot)
    print_report(snap, console, args.snapshot)
    if args.html:
        from .reports.html import write_html_report

        other = read_snapshot(args.compare) if args.compare else None
        path = write_html_report(snap, args.html, source=Path(args.snapshot).name, compare=other,
                                 compare_source=Path(args.compare).name if args.compare else None)
        console.print(f"HTML report: {path}", highlight=False)
    if args.json:
        print(json.dumps(summary_json(snap, args.snapshot)))
    return 0


def _export(args, console) -> int:
    from .reports.memory_viz import export_memory_viz
    from .snapshot import read_snapshot

    path = export_memory_viz(read_snapshot(args.snapshot), args.memory_viz)
    console.print(f"wrote {path} (PyTorch memory snapshot: open it at "
                  "https://pytorch.org/memory_viz)", highlight=False)
    return 0


def _trace(args, console, err) -> int:
    from .devices import DEFAULT_DEVICE, get_device

    command = ["memlens", *(sys.argv[1:] if sys.argv else [])]
    target, recipe, spec, job = _target(args)
    if job is not None and job.note:
        err.print(f"note: {job.note}", highlight=False, markup=False, soft_wrap=True)
    device = get_device(args.device or (recipe.device if recipe else None) or DEFAULT_DEVICE)
    iterations = args.iterations if args.iterations is not None else (
        (recipe.iterations if recipe else None) or 2)
    if iterations < 1:
        raise MemlensError("--iterations must be at least 1")

    if getattr(args, "ranks", None):
        return _trace_all_ranks(args, spec, job, target, device, command, console, err)

    from .targets.session import prepare_process, trace_target

    prepare_process(device, spec.local_world_size if spec else 1)

    progress_mode = args.progress
    if progress_mode == "auto":
        progress_mode = "rich" if err.is_terminal else "none"
    # With --json, stdout carries one JSON object: what the script prints goes to stderr.
    quiet = _stdout_to_stderr() if args.json else contextlib.nullcontext()
    with quiet:
        try:
            snap = trace_target(target, device, iterations, progress_mode=progress_mode,
                                console=err, command=command,
                                max_allocations=args.max_allocations, rank=spec,
                                dynamic_sizes=args.dynamic_sizes or "bound",
                                sdpa_backend=args.sdpa_backend or (
                                    recipe.sdpa_backend if recipe else None))
        except DataDependentError as e:
            # What was traced until the script needed a value: the report, then the error.
            from .reports.terminal import print_report

            print_report(e.partial_snapshot, console, None)
            raise
    path = None
    unwritten = None  # the snapshot could not be written: the report still comes first
    if not args.no_snapshot:
        from .snapshot.output_files import OutputError
        from .snapshot import write_snapshot

        try:
            path = str(write_snapshot(snap, args.snapshot or default_snapshot_path(target)))
        except OutputError as e:
            unwritten = e
    from .reports.terminal import print_report, summary_json

    print_report(snap, console, path)
    if unwritten is not None:
        raise unwritten
    if args.json:
        summary = summary_json(snap, path)
        if args.with_digest and path:
            from .server.digest import digest

            summary["digest"] = digest(snap, path)
        print(json.dumps(summary))
    # Ctrl-C ended the trace: the report of what was traced, then the status of an interrupt.
    return EXIT_INTERRUPTED if snap["meta"].get("interrupted") else 0


@contextlib.contextmanager
def _stdout_to_stderr():
    """Point file descriptor 1 (and sys.stdout) at stderr, also for output from C code."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _target(args):
    """(target, recipe or None, RankSpec or None, Job or None)."""
    if args.command == "run":
        job = _job(args)
        spec = _rank_spec(args, job)
        if spec is not None and args.ranks is None:
            job.target.env.update(spec.env())  # torchrun's variables win over the launch's
            if job.local_rank_arg:  # torch.distributed.launch without --use-env
                job.target.args.insert(0, f"--local-rank={spec.local_rank}")
        return job.target, None, spec, job

    from .targets.recipe import load_recipe
    from .targets.model import ModelTarget, parse_target

    file, symbol = parse_target(args.target)
    recipe = load_recipe(file, symbol, Path(args.recipe) if args.recipe else None)
    for key in ("batch", "precision", "optimizer", "loss"):
        value = getattr(args, key)
        if value is not None:
            setattr(recipe, key, value)
    if args.iterations is not None:
        recipe.iterations = args.iterations
    from .targets.recipe import check_values

    # The overrides obey the recipe's own rules (--batch 0 is no batch).
    check_values(recipe, names={k: f"--{k}" for k in ("batch", "precision", "optimizer", "loss",
                                                      "iterations") if getattr(args, k) is not None})
    return ModelTarget(str(file), symbol, recipe), recipe, None, None


def _job(args):
    """The script to run: after `--`, from --launch or from --from-script (what follows `--`
    is then the shell script's arguments)."""
    from .targets.launchers import Job, from_launch, from_script
    from .targets.script import ScriptTarget

    script = list(args.script)
    if script and script[0] == "--":
        script = script[1:]
    if args.launch and args.from_script:
        raise MemlensError("give --launch or --from-script, not both")
    if args.launch and script:
        raise MemlensError("--launch names the script; remove what follows `--`")
    if args.recorded_job:
        from .targets.job import read_job

        return read_job(args.recorded_job)
    if args.launch:
        return from_launch(args.launch)
    if args.from_script:
        return from_script(args.from_script, script)
    if not script:
        raise MemlensError("nothing to run: give a script after `--`, e.g. "
                           "memlens run -- train.py --lr 3e-4")
    if script[0] == "-m":
        if len(script) < 2:
            raise MemlensError("-m needs a module name")
        return Job(ScriptTarget(path="", module=script[1], args=script[2:]))
    return Job(ScriptTarget(path=script[0], args=script[1:]))


def _rank_spec(args, job):
    """The simulated rank, or None for a single-process run."""
    from .distributed.env import RankSpec, default_nproc_per_node

    world = args.world_size or job.world_size
    if world is None and job.world_size_problem:
        raise MemlensError(f"{job.world_size_problem}: give --world-size", job.location)
    if world is None:
        if args.rank is not None or args.ranks or args.nproc_per_node:
            raise MemlensError("--rank, --ranks and --nproc-per-node need --world-size (or a "
                               "launch line that says how many processes)")
        return None
    nproc = args.nproc_per_node or job.nproc_per_node or default_nproc_per_node(world)
    return RankSpec(world, args.rank or 0, nproc)


def _trace_all_ranks(args, spec, job, target, device, command, console, err) -> int:
    import tempfile

    from .targets.job import write_job
    from .distributed.parallel_runs import Outputs, run_all

    if spec is None:
        raise MemlensError(f"--ranks {args.ranks} needs --world-size (or a launch line that "
                           "says how many processes)")
    jobs = args.jobs or os.cpu_count() or 1
    if jobs < 1:
        raise MemlensError("--jobs must be at least 1")
    snapshot = None if args.no_snapshot else Path(args.snapshot or
                                                  default_snapshot_path(target))
    mode = args.progress
    if mode == "auto":
        mode = "rich" if err.is_terminal else "lines"
    with tempfile.TemporaryDirectory(prefix="memlens-job-") as tmp:
        recorded = None
        if args.from_script:  # record the shell script once, not once per rank
            recorded = Path(tmp, "job.json")
            write_job(job, recorded)
        index, status = run_all(
            spec, lambda rank, path: _worker_argv(args, spec, rank, path, recorded), jobs,
            Outputs(snapshot), mode, err if args.json else console, command, device,
            group=args.ranks == "all")
    if args.json:
        failed = next((r for r in index["ranks"] if r["status"] != "ok"), None)
        if failed is not None:  # one error, as a single trace prints it, for programs
            error = dict(failed["error"])
            error["message"] = f"rank {failed['rank']}: {error.get('message', '')}"
            index = {**index, "error": error}
        elif args.with_digest and snapshot is not None and snapshot.exists():
            from .server.digest import digest_file

            index = {**index, "digest": digest_file(snapshot)}
        print(json.dumps(index))
    return status


def _worker_argv(args, spec, rank: int, snapshot: Path | None,
                 recorded_job: Path | None = None) -> list[str]:
    """`memlens run` arguments that trace one rank of the same job."""
    from .worker_protocol import rank_argv

    if args.launch:
        what = ["--launch", args.launch]
    elif recorded_job is not None:
        what = ["--recorded-job", str(recorded_job)]
    else:
        script = list(args.script)
        what = script if script[:1] == ["--"] else ["--", *script]
    argv = rank_argv(spec.world_size, spec.local_world_size, rank,
                     str(snapshot) if snapshot else None,
                     (("--device", args.device), ("--iterations", args.iterations),
                      ("--max-allocations", args.max_allocations),
                      ("--dynamic-sizes", args.dynamic_sizes),
                      ("--sdpa-backend", args.sdpa_backend)), what)
    return ["--debug", *argv] if args.debug else argv


def _dynamic_sizes(text: str) -> str:
    from .engine.dynamic_sizes import parse_policy

    try:
        return parse_policy(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def default_snapshot_path(target) -> Path:
    """`.memlens/<kind>-<name>-<hash>/<time>.json` in the working directory: the folder the
    language server keeps the same target's snapshots in (worker_protocol.py)."""
    from .worker_protocol import snapshot_folder_name, snapshot_path

    t = target.to_json()
    if t["kind"] == "model":
        name = detail = t["name"]
        path = t["path"]
    else:  # a script: named by its file, as the language server names it
        path = os.path.join(t.get("cwd") or "", t["path"]) if t.get("path") else t["name"]
        name, detail = os.path.basename(path), ""
    return Path(snapshot_path(os.getcwd(), snapshot_folder_name(t["kind"], name, path, detail)))


if __name__ == "__main__":
    sys.exit(main())
