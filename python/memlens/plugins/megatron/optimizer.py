"""The Adam a GPU job runs, where Transformer Engine and apex are not installed.

Megatron takes FusedAdam from Transformer Engine or apex; only without both does it fall back
to torch's Adam, whose multi-tensor (foreach) path allocates full-size fp32 temporaries each
step (`_foreach_sqrt` of every `exp_avg_sq`, among others): 4 bytes per parameter that a GPU
job's fused kernel never allocates. The stand-in holds what FusedAdam holds: `exp_avg` and
`exp_avg_sq` per parameter, made at the first step, and the step count as a host integer per
group (no device tensor per parameter, unlike torch's own fused Adam); its update is done
in place, as the kernel does it, so a step allocates nothing. A trace has no values: the
in-place ops are the kernel's memory, not its arithmetic.
"""

from __future__ import annotations

import functools


def _megatron_version() -> str:
    try:
        from megatron.core import package_info

        return f"megatron-core {package_info.__version__}"
    except ImportError:
        return "megatron-core"


@functools.cache
def fused_adam_class():
    """A class with FusedAdam's constructor (TE's and apex's: `adam_w_mode`,
    `bias_correction`, `capturable`), as megatron-core 0.16 to 0.19 call it
    (megatron/core/optimizer/__init__.py; 0.19 passes `capturable=` to every Adam)."""
    import torch

    class FusedAdam(torch.optim.Optimizer):
        """memlens' stand-in for Transformer Engine's / apex's FusedAdam (its memory; see
        memlens/plugins/megatron/optimizer.py)."""

        def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999),
                     eps=1e-8, adam_w_mode=True, weight_decay=0.0, amsgrad=False,
                     capturable=False, **precision_aware):
            # capturable=False is what a job without --optimizer-cuda-graph passes: the plain
            # kernel, this stand-in. True (CUDA-graph capture of the step) and the
            # precision-aware options are Transformer Engine's alone.
            unsupported = sorted(precision_aware) + ["amsgrad"] * bool(amsgrad) + \
                ["capturable=True (--optimizer-cuda-graph)"] * bool(capturable)
            if unsupported:
                from ...errors import MemlensError

                raise MemlensError(
                    f"{_megatron_version()} asked FusedAdam for {', '.join(unsupported)}, which "
                    "needs Transformer Engine, not installed here; memlens' stand-in "
                    "(memlens/plugins/megatron/optimizer.py) has none")
            super().__init__(params, dict(lr=lr, bias_correction=bias_correction,
                                          betas=betas, eps=eps, weight_decay=weight_decay))
            self.adam_w_mode = adam_w_mode

        @torch.no_grad()
        def step(self, closure=None):
            loss = closure() if closure is not None else None
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if not params:
                    continue
                group["step"] = group.get("step", 0) + 1
                for p in params:
                    if not self.state[p]:
                        self.state[p]["exp_avg"] = torch.zeros_like(p)
                        self.state[p]["exp_avg_sq"] = torch.zeros_like(p)
                grads = [p.grad for p in params]
                exp_avg = [self.state[p]["exp_avg"] for p in params]
                exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in params]
                beta1, beta2 = group["betas"]
                torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
                torch._foreach_mul_(exp_avg_sq, beta2)
                torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
                torch._foreach_addcdiv_(params, exp_avg, exp_avg_sq, value=-group["lr"])
            return loss

    return FusedAdam
