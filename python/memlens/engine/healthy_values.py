"""What a healthy run's checks answer when a script reads them from fake tensors.

`if not torch.isfinite(loss).all(): continue` must train on, not skip every step; `if
torch.isnan(loss): break` must not stop; an assertion on tensors
(`torch._check_tensor_all(cond)`, which reads `cond._is_all_true()`) holds, as it does in a run
that gets past it. Each check's result carries the value of its elements
in a healthy run (no NaN, no inf), through all/any/logical_not/~; a bool read of it answers that
value (accountant.py). `torch.isfinite` is composite (it reaches the dispatch mode as eq/abs/ne),
so it is marked where it is called (patches/torch_core.py).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
HEALTHY_VALUE = "_memlens_healthy_value"
_CHECKS = {aten.isnan.default: False, aten.isinf.default: False, aten.isposinf.default: False,
           aten.isneginf.default: False, aten.isfinite.default: True,
           aten._is_all_true.default: True}
_CARRIED = {aten.all.default, aten.all.dim, aten.any.default, aten.any.dim}
_INVERTED = {aten.logical_not.default, aten.bitwise_not.default}  # `~isfinite(x)`
HEALTHY_OPS = {*_CHECKS, *_CARRIED, *_INVERTED}


def note_healthy_value(func, args, out) -> None:
    if func in _CHECKS:
        value = _CHECKS[func]
    else:
        value = getattr(args[0], HEALTHY_VALUE, None)
        if value is None:
            return
        if func in _INVERTED:
            value = not value
    if isinstance(out, torch.Tensor):
        setattr(out, HEALTHY_VALUE, value)




def mark_finite_check(t) -> None:
    """`torch.isfinite(x)`'s result (patches/torch_core.py calls this): all finite."""
    setattr(t, HEALTHY_VALUE, True)
