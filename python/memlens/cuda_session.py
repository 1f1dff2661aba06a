"""Fake CUDA for a trace: load the shim before torch, and let the traced script see the target
GPU (`memlens.cuda.simulate`) with `torch.cuda.memory_*` answered from the ledger.

A stop-gap joining the `cuda` package to the tracer until the fake-CUDA work wires it in
itself: nothing here decides anything about CUDA, it only connects the two.
"""

from __future__ import annotations

import contextlib
import sys


def prepare(device_type: str, device_count: int) -> None:
    """Before `import torch`: load the fake-CUDA shim for a CUDA target (no-op when torch is
    already imported, or on a machine whose torch has a GPU)."""
    if device_type != "cuda" or "torch" in sys.modules:
        return
    from .cuda.build import CompilerNotFoundError, ensure_fake_cuda_support

    try:
        ensure_fake_cuda_support(device_count=max(1, min(device_count, 64)))
    except CompilerNotFoundError:
        pass  # model targets built on the CPU still trace; scripts that need CUDA say so


def available() -> bool:
    import torch

    from .cuda.build import loaded_shim

    return loaded_shim() is not None or torch.cuda._is_compiled()


class LedgerMemory:
    """`torch.cuda.memory_allocated()` and friends, answered from the ledger."""

    def __init__(self, tracer) -> None:
        self.tracer = tracer

    def allocated(self, i: int) -> int:
        return self.tracer.ledger.current.get(f"cuda:{i}", 0)

    def max_allocated(self, i: int) -> int:
        return self.tracer.ledger.peak.get(f"cuda:{i}", 0)

    def reset_peak(self, i: int) -> None:
        pass  # the ledger keeps the whole trace's peak; the report has the phases' peaks

    def reserved(self, i: int) -> int:
        model = self.tracer.ledger.allocators.get(f"cuda:{i}")
        return model.reserved_bytes if model is not None else self.allocated(i)

    def max_reserved(self, i: int) -> int:
        return self.reserved(i)


@contextlib.contextmanager
def simulate(tracer):
    """The context in which the script sees `device_count` simulated GPUs (a no-op for a CPU
    target, or when fake CUDA is not loaded)."""
    if tracer.device.type != "cuda" or not available():
        yield
        return
    from .cuda.build import loaded_shim
    from .cuda.simulate import simulate_cuda

    count = tracer.rank.local_world_size if tracer.rank is not None else 1
    shim = loaded_shim()
    if shim is not None:
        count = min(count, shim.device_count())
    with simulate_cuda(tracer.device, LedgerMemory(tracer), device_count=count), \
            _data_on_current_device():
        yield


@contextlib.contextmanager
def _data_on_current_device():
    """`torch.tensor(data, device="cuda")` lands on CUDA's current device, as on a GPU (under
    the fake mode torch's C++ fills in device 0, so rank 4 of a node got tensors on cuda:0)."""
    import torch

    originals = {name: getattr(torch, name) for name in ("tensor", "as_tensor")}

    def wrap(original):
        def factory(*args, **kwargs):
            device = kwargs.get("device")
            if device is not None:
                device = torch.device(device) if isinstance(device, str) else device
                if isinstance(device, torch.device) and device.type == "cuda" and \
                        device.index is None:
                    kwargs["device"] = torch.device("cuda", torch.cuda.current_device())
            return original(*args, **kwargs)

        factory.__doc__, factory.__name__ = original.__doc__, original.__name__
        return factory

    for name, original in originals.items():
        setattr(torch, name, wrap(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)
