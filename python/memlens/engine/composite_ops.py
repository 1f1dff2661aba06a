"""Composite ops that reach the accountant whole, and are decomposed there.

A composite op (one with a `CompositeImplicitAutograd` kernel: `t.to("cuda")`, `linear`)
normally decomposes at the autograd keys, before any dispatch mode sees it. Where those keys
are skipped, the whole op reaches the accountant, and FakeTensorMode below it would
constant-fold it for real on a host tensor (making a real CUDA tensor, which a trace cannot):
- under inference mode (Lightning's evaluation loop), every composite op;
- below autograd (a higher-order operator's autograd rule, FlexAttention's, runs its kernel
  there), only one on a host tensor (`torch.tensor(x, device=...)`'s move): a composite op of
  fake tensors may have a CUDA kernel of its own (`_fused_rms_norm`), which a CPU build cannot
  see, and decomposing it would book what a GPU does not make.
"""

from __future__ import annotations

import functools

import torch
from torch._subclasses.fake_tensor import FakeTensor

_AUTOGRAD = torch._C.DispatchKey.AutogradFunctionality


@functools.cache
def _composite(func) -> bool:
    return func.namespace == "aten" and torch._C._dispatch_has_kernel_for_dispatch_key(
        func.name(), "CompositeImplicitAutograd")


def decompose_here(func, args) -> bool:
    """Whether the accountant decomposes `func` (see the module's docstring)."""
    if not _composite(func):
        return False
    if torch.is_inference_mode_enabled():
        return True
    return torch._C._dispatch_tls_is_dispatch_key_excluded(_AUTOGRAD) and any(
        isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) for a in args)
