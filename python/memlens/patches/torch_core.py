"""Patches of core torch that make unmodified training scripts run under FakeTensorMode.

- `torch.utils.swap_tensors`: `module.to(dtype)`, `.half()`, `.cuda()` on a module whose
  parameters are fake tensors always swap (`Module._apply` picks swapping for FakeTensor
  parameters), and the swap refuses tensors with weakrefs (fake mode keeps some). Falling back
  to assigning `.data` has the same effect for a module. Called from `Module._apply`, the swap
  is replaced by what `_apply` does to real parameters (`param.data = param_applied`): a swap
  would leave the old storage in `param_applied` until the next parameter has been converted,
  one parameter's old copy longer than a real run keeps it.
- `torch.get_rng_state` (and `torch.random.get_rng_state`): activation checkpointing saves the
  CPU generator state, a real tensor made without any op, so the accountant would not see it.
"""

from __future__ import annotations

import sys

import torch

from .patcher import Patcher, check_version

TESTED = ("2.9.0", "2.16.0")


def apply(patcher: Patcher, on_external_tensor) -> None:
    check_version("torch", torch.__version__, TESTED)
    original_swap = torch.utils.swap_tensors

    def swap_tensors(t1, t2):
        caller = sys._getframe(1)
        if (caller.f_code.co_name == "_apply" and isinstance(t1, torch.Tensor)
                and caller.f_globals.get("__name__") == "torch.nn.modules.module"):
            with torch.no_grad():
                t1.data = t2.detach()  # the real-tensor path of Module._apply: set_data
            return None
        try:
            return original_swap(t1, t2)
        except RuntimeError as e:
            if "weakref" not in str(e) or not isinstance(t1, torch.Tensor):
                raise
            with torch.no_grad():
                old = t1.detach()
                t1.data = t2.detach()
                t2.data = old

    patcher.setattr(torch.utils, "swap_tensors", swap_tensors)

    original_rng = torch.get_rng_state

    def get_rng_state():
        state = original_rng()
        on_external_tensor(state, "get_rng_state")
        return state

    patcher.setattr(torch, "get_rng_state", get_rng_state)
    patcher.setattr(torch.random, "get_rng_state", get_rng_state)
