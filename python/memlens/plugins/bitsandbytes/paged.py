"""Paged optimizer states (`PagedAdamW8bit`, `paged_adamw_8bit`, ...) on a simulated GPU.

bitsandbytes gives an optimizer state of at least 1e5 elements (optim/optimizer.py,
`get_state_buffer`) a buffer of CUDA managed memory (`F.get_paged`: `cudaMallocManaged`
through its C library), outside PyTorch's caching allocator. Before each parameter's update it
prefetches the buffer to the GPU (`prefetch_state`), so while the optimizer steps the states
are resident in device memory; only under memory pressure does the driver move pages back to
the host (instead of failing with out-of-memory). memlens books them where they are when they
are used: on the GPU, as optimizer state, allocated like any tensor (they are not part of the
caching allocator's pool on a real GPU, which a note says). Eviction is not simulated.

- `get_paged(*shape, dtype, device)`: a zero tensor of that shape on `device`, marked
  `is_paged` as bitsandbytes marks it;
- `fill(A, value)`: `A.fill_(value)` (the C library's fill of managed memory);
- `prefetch_tensor(A)`: nothing to allocate.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch

NOTE = ("bitsandbytes: paged optimizer states (CUDA managed memory, outside PyTorch's caching "
        "allocator) are booked on the GPU as optimizer state, where they are while the "
        "optimizer steps; paging them out to host memory under pressure is not simulated")


def install_paged(patcher, functional: ModuleType, add_note) -> None:
    original = functional.get_paged

    @functools.wraps(original)
    def get_paged(*shape, dtype=torch.float32, device=None):
        add_note(NOTE)
        out = torch.zeros(shape, dtype=dtype, device=device if device is not None else "cuda")
        out.is_paged = True
        out.page_deviceid = out.device.index
        return out

    def fill(A, value, device=None, prefetch=True):
        A.fill_(value)

    def prefetch_tensor(A, to_cpu=False):
        return None

    for name, value in (("get_paged", get_paged), ("fill", fill),
                        ("prefetch_tensor", prefetch_tensor)):
        patcher.setattr(functional, name, value)
