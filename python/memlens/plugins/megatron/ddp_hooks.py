"""Megatron's DistributedDataParallel hooks each parameter's gradient accumulator with the hook
`_make_backward_post_hook(param)` makes: it adds the gradient to the parameter's `main_grad`
(a view of DDP's gradient buffer), drops `param.grad`, and with `overlap_grad_reduce` marks the
parameter ready, which starts its bucket's reduction once the bucket is complete. Declared to
layer replay (engine/layer_replay.py `gradient_hook`): a replayed block calls each parameter's
hook where the recorded block's ran, so a Megatron job's identical layers may be replayed.
Written for megatron-core 0.16-0.19, where the hook reads none of its arguments. The hooks
Megatron calls itself after a layer's backward (`--delay-wgrad-compute`, 0.19's GTP weight
rematerialisation) are left undeclared."""

from __future__ import annotations

import functools
from types import ModuleType


def declare_gradient_hooks(plugin, mod: ModuleType) -> None:
    replay = plugin.tracer.layer_replay
    cls = getattr(mod, "DistributedDataParallel", None)
    if replay is None or cls is None or not hasattr(cls, "_make_backward_post_hook"):
        return  # another layout of DDP: its hooks stay unknown, and replay off in the job
    original = cls._make_backward_post_hook

    @functools.wraps(original)
    def _make_backward_post_hook(self, param):
        hook = original(self, param)
        if getattr(param, "skip_backward_post_hook", False) or \
                getattr(param, "is_gtp_weight_remat", False):
            # Called after the layer's backward (`backward_dw` of --delay-wgrad-compute, a later
            # node): what the layer keeps for it a replayed layer would not have. Undeclared,
            # so the job is traced in full.
            return hook
        return replay.gradient_hook(param, hook)

    plugin.patcher.setattr(cls, "_make_backward_post_hook", _make_backward_post_hook)


PATCHES = {"megatron.core.distributed.distributed_data_parallel": declare_gradient_hooks}
