"""Transformer Engine's dummy weight gradient, for its stand-ins (fp8_linear.py,
grouped_linear.py) and for Megatron's own linear layers.

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


def megatron_linears(plugin, mod) -> None:
    """Megatron's own linear layers (`tensor_parallel/layers.py`: the output layer, the local
    spec's layers and those standing in for TE's) hand autograd TE's dummy too where TE is
    installed (`if HAVE_TE: get_dummy_wgrad(...)`), whichever `--transformer-impl`, and a new
    `torch.empty` each backward where it is not. A GPU job has TE (Megatron's containers; the
    FusedAdam stand-in assumes the same): they share the stand-ins' cache, one tensor per
    (shape, dtype) kept for the life of the process. Written for megatron-core 0.16 to 0.19,
    whose module imports `get_dummy_wgrad` beside `HAVE_TE` (which the other patches of the
    module must not read for whether TE is installed)."""
    import torch

    if getattr(mod, "HAVE_TE", True):
        return

    def get_dummy_wgrad(shape, dtype, zero=False):
        plugin.note("Transformer Engine is not installed here: Megatron's linear layers keep "
                    "its dummy weight gradient (one per weight shape, for the life of the "
                    "process) under gradient-accumulation fusion, as where TE is installed")
        dummy = dummy_wgrad(plugin, shape, dtype,
                            torch.device("cuda", torch.cuda.current_device()))
        if zero:
            dummy.fill_(0)
        return dummy

    plugin.patcher.setattr(mod, "HAVE_TE", True)
    plugin.patcher.setattr(mod, "get_dummy_wgrad", get_dummy_wgrad)
