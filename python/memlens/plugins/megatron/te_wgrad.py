"""Transformer Engine's dummy weight gradient, for its stand-ins (fp8_linear.py,
grouped_linear.py).

With gradient-accumulation fusion TE's GEMM writes a weight's gradient into its `main_grad`, and
hands autograd `get_dummy_wgrad(main_grad.shape, weight.dtype)` for Megatron's DDP hooks (which
see `grad_added_to_main_grad` and drop it): one tensor per (shape, dtype), made at first use and
kept for the life of the process (TE 2.10, `pytorch/module/base.py`), returned `.detach()`ed,
so autograd's AccumulateGrad takes the alias as the parameter's gradient without a copy.
"""

from __future__ import annotations

from ... import categories as C


def fused_wgrad(plugin, weight, device):
    """What TE's fused weight-gradient GEMM hands autograd once it has accumulated into
    `weight.main_grad`: its dummy (marking the weight's gradient as added, for Megatron's DDP),
    or nothing where the weight is not Megatron's (no `grad_added_to_main_grad`)."""
    if not hasattr(weight, "grad_added_to_main_grad"):
        return None
    weight.grad_added_to_main_grad = True
    return dummy_wgrad(plugin, weight.main_grad.shape, weight.dtype, device)


def dummy_wgrad(plugin, shape: tuple, dtype, device):
    """TE's cached dummy gradient of `shape` and `dtype`, on `device`."""
    import torch

    key = (tuple(shape), dtype)
    dummy = plugin.te_dummy_wgrads.get(key)
    if dummy is None:
        dummy = torch.empty(key[0], dtype=dtype, device=device)
        plugin.tracer.classifier.pin(dummy, C.GRADIENT)
        plugin.te_dummy_wgrads[key] = dummy
    return dummy.detach()
