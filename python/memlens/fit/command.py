"""`memlens fit`: search a job's configurations for the ones that fit the card.

    memlens fit --device h100-80gb --gpus 64 --micro-batch 1,2,4,8 --recompute none,full \\
        --tp 1,2,4,8 --from-script examples/megatron-lm/llama3_8b.sh
    memlens fit --gpus 2 --micro-batch 1,2,4 --axis micro-batch=--batch-size -- train.py

Each point is traced as `memlens run` traces a job (its distinct ranks only) in a worker
process, locally (`--jobs`) or as a Ray task (`--ray`); what is known prunes the rest
(search.py); every result is kept in the run folder (run_dir.py), so the same command resumes.
docs/fit.md is the user's guide.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import MemlensError
from .report import SORT_KEYS
from .space import BUILTIN_AXES

EXIT_INTERRUPTED = 130


def add_parser(sub) -> None:
    fit = sub.add_parser("fit", help="search a job's configurations for those that fit",
                         description="Trace a job over a space of configurations and print the "
                         "ones that fit the card (docs/fit.md).")
    fit.add_argument("--device", default=None, help="target device (default h100-80gb)")
    fit.add_argument("--iterations", type=int, default=None, help="iterations per trace")
    fit.add_argument("--nproc-per-node", type=int, default=None)
    g = fit.add_argument_group("the space (comma-separated values)")
    for name in BUILTIN_AXES:
        g.add_argument(f"--{name}", default=None, metavar="V,V,...")
    g.add_argument("--axis", action="append", metavar="NAME=FLAG[:V,V]",
                   help="the script's flag (or env:VARIABLE) for an axis, e.g. "
                   "micro-batch=--batch-size; a new NAME needs its values")
    g.add_argument("--arg", action="append", metavar="FLAG=V,V",
                   help="substitute a script argument, e.g. \"--seq-len=1024,2048\"")
    g.add_argument("--env", action="append", metavar="VAR=V,V",
                   help="substitute an environment variable, e.g. \"SEQ=1024,2048\"")
    g.add_argument("--monotone", action="append", metavar="NAME=up|down|none",
                   help="how memory moves as the axis' value grows (prunes the search)")
    g.add_argument("--config", default=None, help="a memlens.toml or pyproject.toml to read "
                   "[fit] / [tool.memlens.fit] from (default: the nearest)")
    s = fit.add_argument_group("the search")
    s.add_argument("--no-prune", action="store_true", help="trace every point")
    s.add_argument("--all-fits", action="store_true",
                   help="also trace the points known to fit (for their numbers)")
    s.add_argument("--jobs", type=int, default=None, help="traces at a time (default: cores)")
    s.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS",
                   help="run each trace as a Ray task: auto (RAY_ADDRESS, or the running "
                   "cluster), an address, or local (start one here)")
    s.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs a trace task declares")
    s.add_argument("--ray-memory", default="2GiB", help="host memory a trace task declares")
    s.add_argument("--run-dir", default=None, help="where results are kept (default "
                   ".memlens/fit/<script>-<fingerprint>); the same command resumes there")
    o = fit.add_argument_group("output")
    o.add_argument("--sort", choices=SORT_KEYS, default=None, help="order of the frontier "
                   "(default peak)")
    o.add_argument("--json", action="store_true", help="print the search as one JSON object")
    o.add_argument("--html", default=None, help="the page of peaks (default RUN_DIR/fit.html)")
    o.add_argument("--no-snapshots", action="store_true", help="keep results, not snapshots")
    o.add_argument("--progress", choices=("auto", "rich", "lines", "json", "none"),
                   default="auto", help="json: a JSON record on stderr per finished point (for "
                   "the language server)")
    fit.add_argument("--launch", default=None, metavar="FILE:NAME")
    fit.add_argument("--from-script", default=None, metavar="FILE[:LINE]")
    fit.add_argument("script", nargs=argparse.REMAINDER, help="-- script.py [ARGS...]")


def protect_values(argv: list[str]) -> list[str]:
    """`--arg "--batch-size=8,16"` as `--arg=--batch-size=8,16`: argparse would take a value
    that starts with -- for an option of its own."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return out + argv[i:]
        if a in ("--arg", "--axis", "--env") and i + 1 < len(argv):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def job_of(args):
    """The job as `memlens run` takes it: after `--`, --launch, or --from-script."""
    from ..targets.launchers import Job, from_launch, from_script
    from ..targets.script import ScriptTarget

    script = list(args.script)
    if script[:1] == ["--"]:
        script = script[1:]
    if args.launch and (args.from_script or script):
        raise MemlensError("--launch names the script: give no --from-script and nothing after --")
    if args.launch:
        job = from_launch(args.launch)
    elif args.from_script:
        job = from_script(args.from_script, script)
    elif not script:
        raise MemlensError("nothing to search: give a script after `--`, --launch or "
                           "--from-script, e.g. memlens fit --micro-batch 1,2,4 --axis "
                           "micro-batch=--batch-size -- train.py")
    elif script[0] == "-m":
        job = Job(ScriptTarget(path="", module=script[1] if len(script) > 1 else "",
                               args=script[2:]))
    else:
        job = Job(ScriptTarget(path=script[0], args=script[1:]))
    job.target.cwd = job.target.cwd or os.getcwd()
    return job


def run(args, console, err) -> int:
    from ..devices import DEFAULT_DEVICE, get_device
    from ..units import parse_bytes
    from .axes_from_options import build_space, load_config
    from .driver import Fit

    config, source = load_config(Path(args.config) if args.config else None)
    job = job_of(args)
    space = build_space(args, config, job)
    device = get_device(args.device or config.get("device") or DEFAULT_DEVICE)
    iterations = args.iterations or config.get("iterations")
    jobs = args.jobs or config.get("jobs")
    if jobs is not None and jobs < 1:
        raise MemlensError("--jobs must be at least 1")
    if not any(a.target.kind == "world" for a in space.axes) and job.world_size is None \
            and job.world_size_problem:
        raise MemlensError(f"{job.world_size_problem}: give --gpus", job.location)
    ray_address = args.ray or (os.environ.get("RAY_ADDRESS") and "auto")
    if ray_address:
        from .ray_runner import RayRunner

        try:
            memory = parse_bytes(args.ray_memory)
        except ValueError as e:
            raise MemlensError(f"--ray-memory: {e}") from None
        runner = RayRunner(ray_address, jobs, args.ray_cpus, memory)
    else:
        from .local_runner import LocalRunner

        runner = LocalRunner(jobs or os.cpu_count() or 1)
    progress = args.progress
    if progress == "auto":
        progress = "rich" if err.is_terminal else "lines"
    fit = Fit(job, space, device, iterations, args, runner, ["memlens", *sys.argv[1:]],
              sort_key(args, config))
    if source:
        err.print(f"space from {source} and the command line", highlight=False, markup=False)
    document, interrupted = fit.run_search(err, progress)
    fit.print(document, console)
    if args.json:
        print(json.dumps(document))
    return EXIT_INTERRUPTED if interrupted else 0


def sort_key(args, config: dict[str, Any]) -> str:
    key = args.sort or config.get("sort") or "peak"
    if key not in SORT_KEYS:
        raise MemlensError(f"sort = {key!r}: use one of {', '.join(SORT_KEYS)}")
    return key
