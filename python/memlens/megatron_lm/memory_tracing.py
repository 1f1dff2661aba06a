"""Memory tracing from inside Megatron-LM, for users who prefer a flag to `memlens run`.

`integrations/megatron-lm.patch` adds two arguments to Megatron-LM and calls this module:

    torchrun --nproc_per_node 8 pretrain_gpt.py ... --memory-tracing \
        --save-peak-memory-snapshot snapshots/

Each process then traces its own rank (WORLD_SIZE, RANK and LOCAL_WORLD_SIZE from the
launcher) the way `memlens run --world-size W --rank R` does: fake tensors on the simulated
GPU, a fake process group, the Megatron plugin's set-up (mock data, two iterations, ...). No GPU
and no working NCCL are needed, and the processes do not talk to each other.

- `prepare(argv)`: before `import torch` (the patch calls it at the top of the entry point):
  loads fake CUDA for the trace.
- `session(argv)`: around Megatron's `pretrain`: the trace; on the way out the snapshot is
  written and the report printed.

`MEMLENS_DEVICE` names the target GPU (default: memlens' default device).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from ..distributed.env import RankSpec
    from ..engine.tracer import Tracer

FLAG, SNAPSHOT_FLAG = "--memory-tracing", "--save-peak-memory-snapshot"


def enabled(argv: list[str] | None = None) -> bool:
    return FLAG in (sys.argv if argv is None else argv)


def prepare(argv: list[str] | None = None) -> None:
    """Load fake CUDA before torch when the run is to be traced."""
    if not enabled(argv):
        return
    from ..devices import DEFAULT_DEVICE, get_device
    from ..targets.session import prepare_process

    device = get_device(os.environ.get("MEMLENS_DEVICE", DEFAULT_DEVICE))
    prepare_process(device, _rank().local_world_size)


@contextlib.contextmanager
def session(argv: list[str] | None = None) -> Iterator[object]:
    """Trace what runs inside (Megatron's pretrain) when `--memory-tracing` is given."""
    argv = sys.argv if argv is None else argv
    if not enabled(argv):
        yield None
        return
    from ..devices import DEFAULT_DEVICE, get_device
    from ..engine.tracer import Tracer

    spec = _rank()
    os.environ.update(spec.env())  # what torchrun would set, for a plain `python` launch
    tracer = Tracer(get_device(os.environ.get("MEMLENS_DEVICE", DEFAULT_DEVICE)), rank=spec)
    with tracer:
        yield tracer
    _finish(tracer, argv, spec)


def snapshot_path(value: str | None, rank: int, world_size: int) -> Path | None:
    """Where a rank's snapshot goes: `{rank}` in the value is replaced; a directory (or a value
    ending in `/`) gets `rank-R.json`; a file name in a job of several ranks gets `-rankR`."""
    if not value:
        return None
    if "{rank}" in value:
        return Path(value.replace("{rank}", str(rank)))
    path = Path(value)
    if value.endswith(("/", os.sep)) or path.is_dir() or not path.suffix:
        return path / f"rank-{rank}.json"
    if world_size > 1:
        return path.with_name(f"{path.stem}-rank{rank}{path.suffix}")
    return path


def _rank():
    from ..distributed.env import RankSpec

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or None
    return RankSpec(world, int(os.environ.get("RANK", "0")), local)


def _finish(tracer: Tracer, argv: list[str], spec: RankSpec) -> None:
    from rich.console import Console

    from ..reports.terminal import print_report

    snap = tracer.snapshot(command=list(argv), target={
        "kind": "script", "name": Path(argv[0]).stem if argv else "megatron",
        "path": argv[0] if argv else None, "args": list(argv[1:]), "cwd": os.getcwd()},
        stopped_after_iterations=tracer.stopped)
    path = snapshot_path(_value(argv, SNAPSHOT_FLAG), spec.rank, spec.world_size)
    if path is not None:
        from ..snapshot import write_snapshot

        path.parent.mkdir(parents=True, exist_ok=True)
        write_snapshot(snap, path)
    print_report(snap, Console(), str(path) if path else None)


def _value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
