"""`memlens run --ranks all|every`: every distinct rank of the job traced in worker processes
(distributed/parallel_runs.py), each with the same options as the parent's command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..distributed.object_p2p import ENV_FOLDER
from ..errors import MemlensError
from ..worker.command import WorkerCommand
from ..worker.protocol import cli_snapshot_path

def trace_all_ranks(args, spec, job, target, device, command, console, err) -> int:
    import tempfile

    from ..targets.job import write_job
    from ..distributed.parallel_runs import Outputs, run_all

    if spec is None:
        raise MemlensError(f"--ranks {args.ranks} needs --world-size (or a launch line that "
                           "says how many processes)")
    jobs = args.jobs or os.cpu_count() or 1
    if jobs < 1:
        raise MemlensError("--jobs must be at least 1")
    snapshot = None if args.no_snapshot else Path(
        args.snapshot or cli_snapshot_path(target.to_json(), os.getcwd()))
    mode = args.progress
    if mode == "auto":
        mode = "rich" if err.is_terminal else "lines"
    with tempfile.TemporaryDirectory(prefix="memlens-job-") as tmp:
        # Objects one rank sends another are recorded here, for the rank that receives them.
        objects = Path(tmp, "objects")
        objects.mkdir()
        # A recorded job (memlens fit hands one in) is handed on to every rank's worker.
        recorded = Path(args.recorded_job) if args.recorded_job else None
        # A shell script, or a launch command on the command line (accelerate reads its
        # configuration in a helper process), is resolved once, not once per rank.
        launched = not args.launch and job is not None and job.world_size is not None
        if recorded is None and (args.from_script or launched):
            recorded = Path(tmp, "job.json")
            write_job(job, recorded)
        index, status = run_all(
            spec, lambda rank, path: worker_argv(args, spec, rank, path, recorded), jobs,
            Outputs(snapshot), mode, err if args.json else console, command, device,
            group=args.ranks == "all", env={ENV_FOLDER: str(objects)})
    if args.json:
        failed = next((r for r in index["ranks"] if r["status"] != "ok"), None)
        if failed is not None:  # one error, as a single trace prints it, for programs
            error = dict(failed["error"])
            error["message"] = f"rank {failed['rank']}: {error.get('message', '')}"
            index = {**index, "error": error}
        elif args.with_digest and snapshot is not None and snapshot.exists():
            from ..snapshot.digest import digest_file

            index = {**index, "digest": digest_file(snapshot)}
        print(json.dumps(index))
    return status


def worker_argv(args, spec, rank: int, snapshot: Path | None,
                 recorded_job: Path | None = None) -> list[str]:
    """`memlens run` arguments that trace one rank of the same job."""
    if args.launch:
        what = ["--launch", args.launch]
    elif recorded_job is not None:
        what = ["--recorded-job", str(recorded_job)]
    elif args.from_script:
        what = ["--from-script", args.from_script, "--", *_script_args(args.script)]
    else:
        script = list(args.script)
        what = script if script[:1] == ["--"] else ["--", *script]
    return WorkerCommand(
        what, world_size=spec.world_size, nproc_per_node=spec.local_world_size, rank=rank,
        snapshot=str(snapshot) if snapshot else False, device=args.device,
        iterations=args.iterations, options=(("--max-allocations", args.max_allocations),
                                             ("--dynamic-sizes", args.dynamic_sizes),
                                             ("--sdpa-backend", args.sdpa_backend)),
        extra=("--no-layer-replay",) if getattr(args, "no_layer_replay", False) else (),
        debug=args.debug).args()


def _script_args(script: list[str]) -> list[str]:
    return script[1:] if script[:1] == ["--"] else list(script)


def peer_argv(args, spec, rank: int) -> list[str]:
    """`memlens run` arguments that trace another rank of the job this process traces one rank
    of (the sender of objects it receives: distributed/object_p2p.py)."""
    recorded = Path(args.recorded_job) if args.recorded_job else None
    return worker_argv(args, spec, rank, None, recorded)
