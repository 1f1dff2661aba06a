"""Patches of torch.utils.data that let a DataLoader run as it would on a GPU machine.

- `torch.utils.data._utils.pin_memory.pin_memory`: with `pin_memory=True` and workers, a
  DataLoader pins batches in a thread of its own. The tracer's dispatch modes are per thread,
  so there the copy would reach the CPU-only build's real pinning, which needs CUDA. A batch
  pinned outside the traced thread is handed over as it is (page-locked host memory is no
  device memory); in the traced thread pinning is a host copy (accountant.py).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .patcher import Patcher, check_tested

def apply(patcher: Patcher) -> None:
    check_tested("torch_data", torch.__version__)
    from torch.utils.data._utils import pin_memory as module

    original = module.pin_memory

    def pin_memory(data, device=None):
        if _get_current_dispatch_mode() is None:  # the DataLoader's own pinning thread
            return data
        return original(data, device)

    patcher.setattr(module, "pin_memory", pin_memory)
