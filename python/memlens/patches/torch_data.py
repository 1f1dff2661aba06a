"""Patches of torch.utils.data that let a DataLoader run as it would on a GPU machine.

- `torch.utils.data._utils.pin_memory.pin_memory`: with `pin_memory=True` and workers, a
  DataLoader pins batches in a thread of its own, outside the tracer's dispatch modes (they
  are per thread). With CUDA hooks that pin (the fake-CUDA shim's host allocator, or a CUDA
  build's; cuda/pinned_memory.py) the batch is pinned there for real, as on a GPU machine, and
  not booked (page-locked host memory is no device memory); without them it is handed over as
  it is. In the traced thread pinning is booked as a host copy (accountant.py).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ..cuda.pinned_memory import pinning_available
from .patcher import Patcher, check_tested


def apply(patcher: Patcher) -> None:
    check_tested("torch_data", torch.__version__)
    from torch.utils.data._utils import pin_memory as module

    original = module.pin_memory

    def pin_memory(data, device=None):
        if _get_current_dispatch_mode() is None and not pinning_available():
            return data  # the DataLoader's own pinning thread, on a target without CUDA
        return original(data, device)

    patcher.setattr(module, "pin_memory", pin_memory)
