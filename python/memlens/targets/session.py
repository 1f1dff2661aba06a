"""One trace from start to snapshot: pick the target's runner, trace, build the snapshot."""

from __future__ import annotations

import sys
from typing import Any

from ..devices import DeviceSpec


def prepare_process(device: DeviceSpec | str, device_count: int = 1) -> None:
    """Before torch is imported: a GPU target on a machine without one needs the fake-CUDA
    shim (memlens.cuda.build) for autograd on fake cuda tensors; `device_count` GPUs per node
    (a simulated rank selects cuda:LOCAL_RANK). `memlens.prepare` in the Python API."""
    if isinstance(device, str):
        from ..devices import get_device

        device = get_device(device)
    from ..cuda.build import FakeCudaError, ensure_fake_cuda_support, loaded_shim
    from ..worker.fork_child import run_cold_instead

    if device.type != "cuda":
        if loaded_shim() is not None:  # a warm worker's child: its shim says "a GPU is here"
            run_cold_instead(f"a {device.name} target needs a process without the CUDA shim")
        return
    if loaded_shim() is None and "torch" in sys.modules:  # a CPU target's warm worker's child
        run_cold_instead(f"a {device.name} target needs the CUDA shim, loaded before torch")
    from ..errors import MemlensError

    try:
        ensure_fake_cuda_support(device_count=device_count)
    except FakeCudaError as e:
        raise MemlensError(f"cannot simulate a {device.name} here: {e}") from None


def trace_target(target, device: DeviceSpec, iterations: int, progress_mode: str = "none",
                 console=None, command: list[str] | None = None,
                 max_allocations: int | None = None, rank=None,
                 dynamic_sizes: str = "bound", sdpa_backend: str | None = None,
                 device_count: int = 1, layer_replay: bool = False) -> dict[str, Any]:
    """`rank`: a RankSpec to simulate that rank of a distributed job (the script target must
    already carry the rank's environment). A script stopped by a value the trace cannot make
    up raises DataDependentError carrying the snapshot of what was traced until then.
    `sdpa_backend`: the attention kernel to try first (cuda/sdpa.py), else the device's order.
    `device_count`: the GPUs a single process sees (DataParallel; a rank sees its node's).
    `layer_replay`: replay identical blocks (engine/layer_replay.py); LayerReplayAbandoned when
    a replay turned out wrong or the script failed after one: the caller traces again without."""
    from ..engine.interrupt import stop_on_interrupt
    from ..progress import Progress
    from ..snapshot import build_snapshot
    from ..snapshot.build import DEFAULT_MAX_ALLOCATIONS
    from .model import ModelTarget, run_model, unload
    from .script import run_script
    from ..engine.tracer import Tracer
    from ..errors import DataDependentError, LayerReplayAbandoned

    tracer = Tracer(device, iterations=iterations, rank=rank, dynamic_sizes=dynamic_sizes,
                    sdpa_backend=sdpa_backend, device_count=device_count,
                    layer_replay=layer_replay)
    try:
        with Progress(progress_mode, console, rank.rank if rank else None) as progress:
            tracer.phases.on_phase = progress.update
            precision = target.recipe.precision if isinstance(target, ModelTarget) else None
            try:
                with stop_on_interrupt(tracer):
                    if isinstance(target, ModelTarget):
                        stopped = run_model(target, tracer,
                                            "cpu" if device.type == "cpu" else "cuda")
                    else:
                        stopped = run_script(target, tracer)
            except Exception as e:
                # A script that fails where blocks were replayed (or could have been) is traced
                # again in full: if it fails there too, that is the error the user sees.
                replay = tracer.layer_replay
                if replay is not None and (replay.groups or replay.abandoned):
                    raise LayerReplayAbandoned(
                        replay.abandoned or f"the script failed where blocks were replayed "
                        f"({type(e).__name__})") from e
                if not isinstance(e, DataDependentError):
                    raise
                e.partial_snapshot = build_snapshot(tracer, {
                    "command": command or [], "target": target.to_json(),
                    "precision": precision, "stopped_after_iterations": False},
                    max_allocations or DEFAULT_MAX_ALLOCATIONS)
                raise
            tracer.check_layer_replay()
            progress.update("building snapshot")
        sdpa_note = tracer.sdpa.note()
        if sdpa_note:
            tracer.add_note(sdpa_note)
        if stopped and device.type == "cuda":
            from ..cuda.graphs import uncaptured_note

            graphs_note = uncaptured_note(getattr(target, "path", None), tracer.iterations)
            if graphs_note:
                tracer.add_note(graphs_note)
        meta = {"command": command or [], "target": target.to_json(), "precision": precision,
                "stopped_after_iterations": stopped and not tracer.interrupted,
                "kernels": {"scaled_dot_product_attention": dict(tracer.sdpa_backends)}}
        if tracer.sdpa.to_json() is not None:
            meta["sdpa"] = tracer.sdpa.to_json()
        meta["layer_replay"] = tracer.layer_replay_meta()
        return build_snapshot(tracer, meta, max_allocations or DEFAULT_MAX_ALLOCATIONS)
    finally:  # after the snapshot: it finds the model classes' files through sys.modules
        if isinstance(target, ModelTarget):
            unload(target)
