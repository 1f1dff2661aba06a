"""`memlens run` and `memlens trace`: one target traced in this process (or every rank, in
workers: all_ranks.py), its report printed and its snapshot written."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from ..errors import DataDependentError, LayerReplayAbandoned, MemlensError
from ..worker.protocol import cli_snapshot_path
from .all_ranks import trace_all_ranks
from .exit_codes import EXIT_INTERRUPTED

def trace(args, console, err) -> int:
    from ..devices import DEFAULT_DEVICE, get_device

    command = ["memlens", *(sys.argv[1:] if sys.argv else [])]
    target, recipe, spec, job = _target(args)
    if job is not None and job.note:
        err.print(f"note: {job.note}", highlight=False, markup=False, soft_wrap=True)
    device = get_device(args.device or (recipe.device if recipe else None) or DEFAULT_DEVICE)
    iterations = args.iterations if args.iterations is not None else (
        (recipe.iterations if recipe else None) or 2)
    if iterations < 1:
        raise MemlensError("--iterations must be at least 1")

    gpus = _single_process_gpus(args, spec)
    if getattr(args, "ranks", None):
        return trace_all_ranks(args, spec, job, target, device, command, console, err)
    if job is not None:  # a missing script is said before torch is imported (seconds)
        from ..targets.script import resolve

        resolve(target)

    from ..targets.session import prepare_process, trace_target

    if spec is not None:  # a rank that receives objects may trace their sender
        from ..distributed import object_p2p
        from .all_ranks import peer_argv

        object_p2p.configure(lambda rank: peer_argv(args, spec, rank))
    prepare_process(device, spec.local_world_size if spec else gpus)
    from ..engine import heap

    heap.process_ends_with_the_trace()  # one trace, then the process exits (or execs again)

    progress_mode = args.progress
    if progress_mode == "auto":
        progress_mode = "rich" if err.is_terminal else "none"
    # With --json, stdout carries one JSON object: what the script prints goes to stderr.
    quiet = _stdout_to_stderr() if args.json else contextlib.nullcontext()
    torch_log = _torch_log(args, target)
    abandoned = None
    with quiet, torch_log:
        try:
            snap = trace_target(target, device, iterations, progress_mode=progress_mode,
                                console=err, command=command,
                                max_allocations=args.max_allocations, rank=spec,
                                dynamic_sizes=args.dynamic_sizes or "bound",
                                sdpa_backend=args.sdpa_backend or (
                                    recipe.sdpa_backend if recipe else None),
                                device_count=gpus, layer_replay=_layer_replay(args))
        except LayerReplayAbandoned as e:
            abandoned = str(e)  # traced again once stdout is itself again (--json)
        except DataDependentError as e:
            # What was traced until the script needed a value: the report, then the error.
            from ..reports.terminal import print_report

            print_report(e.partial_snapshot, console, None)
            raise
    if abandoned is not None:
        _trace_again_in_full(abandoned)
    path = None
    unwritten = None  # the snapshot could not be written: the report still comes first
    if not args.no_snapshot:
        from ..snapshot.output_files import OutputError
        from ..snapshot import write_snapshot

        try:
            path = str(write_snapshot(snap, args.snapshot or
                                      cli_snapshot_path(target.to_json(), os.getcwd())))
        except OutputError as e:
            unwritten = e
    from ..reports.terminal import print_report, summary_json

    print_report(snap, console, path)
    if unwritten is not None:
        raise unwritten
    if args.json:
        summary = summary_json(snap, path)
        if args.with_digest and path:
            from ..snapshot.digest import digest

            summary["digest"] = digest(snap, path)
        print(json.dumps(summary))
    # Ctrl-C ended the trace: the report of what was traced, then the status of an interrupt.
    return EXIT_INTERRUPTED if snap["meta"].get("interrupted") else 0


def _layer_replay(args) -> bool:
    """Replay repeated layers, unless asked not to or a replay was abandoned (this process
    traces again in full)."""
    return not getattr(args, "no_layer_replay", False) and \
        not os.environ.get(LayerReplayAbandoned.ENV)


def _trace_again_in_full(why: str) -> None:
    """A layer replay turned out wrong: become the same command without it (never returns).
    The new process says why in the snapshot's meta."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ[LayerReplayAbandoned.ENV] = why
    os.execv(sys.executable, [sys.executable, "-m", "memlens", *sys.argv[1:]])


@contextlib.contextmanager
def _torch_log(args, target):
    """torch's own log records (fake_tensor's traceback of an op that failed, before memlens'
    one clean error) go to `.memlens/logs/` beside the snapshots, named like the language
    server's trace logs; one line says where. A worker's stderr is its trace log already
    (the server files it), and --debug shows everything."""
    if args.progress == "json" or args.debug:
        yield
        return
    from ..engine.torch_logs import TraceLogFile, torch_logs_to

    snapshot = Path(cli_snapshot_path(target.to_json(), os.getcwd()))
    log = TraceLogFile(str(snapshot.parent.parent / "logs" /
                           f"{snapshot.parent.name}-{snapshot.stem}.log"))
    try:
        with torch_logs_to(log):
            yield
    finally:
        log.close()
        if log.records:
            s = "" if log.records == 1 else "s"
            print(f"torch logged {log.records} message{s}: {log.path}", file=sys.stderr)


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
            if job.local_rank_arg:  # torch.distributed.launch without --use-env, deepspeed
                job.target.args.insert(0, f"{job.local_rank_arg}={spec.local_rank}")
        return job.target, None, spec, job

    from ..targets.recipe import load_recipe
    from ..targets.model import ModelTarget, parse_target

    file, symbol = parse_target(args.target)
    recipe = load_recipe(file, symbol, Path(args.recipe) if args.recipe else None)
    for key in ("batch", "precision", "optimizer", "loss"):
        value = getattr(args, key)
        if value is not None:
            setattr(recipe, key, value)
    if args.iterations is not None:
        recipe.iterations = args.iterations
    from ..targets.recipe import check_values

    # The overrides obey the recipe's own rules (--batch 0 is no batch).
    given = ("batch", "precision", "optimizer", "loss", "iterations")
    check_values(recipe, names={k: f"--{k}" for k in given if getattr(args, k) is not None})
    return ModelTarget(str(file), symbol, recipe), recipe, None, None


def _job(args):
    """The script to run: after `--`, from --launch or from --from-script (what follows `--`
    is then the shell script's arguments)."""
    from ..targets.launchers import Job, from_command, from_launch, from_script
    from ..targets.script import ScriptTarget

    script = list(args.script)
    if script and script[0] == "--":
        script = script[1:]
    if args.launch and args.from_script:
        raise MemlensError("give --launch or --from-script, not both")
    if args.launch and script:
        raise MemlensError("--launch names the script; remove what follows `--`")
    if args.recorded_job:
        from ..targets.job import read_job

        return read_job(args.recorded_job)
    if args.launch:
        return from_launch(args.launch)
    if args.from_script:
        return from_script(args.from_script, script)
    if not script:
        raise MemlensError("nothing to run: give a script after `--`, e.g. "
                           "memlens run -- train.py --lr 3e-4")
    launched = from_command(script, os.getcwd())
    if launched is not None:
        return launched
    if script[0] == "-m":
        if len(script) < 2:
            raise MemlensError("-m needs a module name")
        return Job(ScriptTarget(path="", module=script[1], args=script[2:]))
    return Job(ScriptTarget(path=script[0], args=script[1:]))


def _single_process_gpus(args, spec) -> int:
    """--gpus: the GPUs one process of no distributed job sees (a rank sees its node's)."""
    gpus = getattr(args, "gpus", None)
    if gpus is None:
        return 1
    if spec is not None:
        raise MemlensError("--gpus is for a single process; a rank of a distributed job sees "
                           "its node's GPUs: give --nproc-per-node")
    if not 1 <= gpus <= 64:
        raise MemlensError(f"--gpus must be between 1 and 64, not {gpus}")
    return gpus


def _rank_spec(args, job):
    """The simulated rank, or None for a single-process run."""
    from ..distributed.env import RankSpec, default_nproc_per_node

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

