"""Patches of core torch that make unmodified training scripts run under FakeTensorMode.

- `torch.utils.swap_tensors`: `module.to(dtype)`, `.half()`, `.cuda()` on a module whose
  parameters are fake tensors always swap, and the swap refuses tensors with weakrefs (fake
  mode keeps some). Falling back to assigning `.data` has the same effect for a module.
- `torch.get_rng_state` (and `torch.random.get_rng_state`): activation checkpointing saves the
  CPU generator state, a real tensor made without any op, so the accountant would not see it.
- `torch.UntypedStorage.resize_`: resizing a storage directly is no op a dispatch mode sees, and
  FSDP frees and re-allocates unsharded parameters that way (`resize_(0)`, `resize_(n)`; FSDP1
  through `TypedStorage._resize_`, which calls it).
"""

from __future__ import annotations

import torch

from .patcher import Patcher, check_version

TESTED = ("2.9.0", "2.16.0")


def apply(patcher: Patcher, on_external_tensor, on_storage_resized) -> None:
    check_version("torch", torch.__version__, TESTED)
    original_swap = torch.utils.swap_tensors

    def swap_tensors(t1, t2):
        try:
            return original_swap(t1, t2)
        except RuntimeError as e:
            if "weakref" not in str(e) or not isinstance(t1, torch.Tensor):
                raise
            with torch.no_grad():
                old = t1.detach()
                t1.data = t2.detach()
                t2.data = old
            # A fake tensor keeps its device in a Python attribute that `.data =` leaves alone:
            # without this, `.to("cuda")` of a module built on the CPU would stay on the CPU.
            if hasattr(t1, "fake_device") and hasattr(t2, "fake_device"):
                t1.fake_device, t2.fake_device = t2.fake_device, t1.fake_device

    patcher.setattr(torch.utils, "swap_tensors", swap_tensors)

    original_rng = torch.get_rng_state

    def get_rng_state():
        state = original_rng()
        on_external_tensor(state, "get_rng_state")
        return state

    patcher.setattr(torch, "get_rng_state", get_rng_state)
    patcher.setattr(torch.random, "get_rng_state", get_rng_state)

    original_resize = torch.UntypedStorage.resize_

    def resize_(storage, size):
        out = original_resize(storage, size)
        on_storage_resized(storage)
        return out

    patcher.setattr(torch.UntypedStorage, "resize_", resize_)
