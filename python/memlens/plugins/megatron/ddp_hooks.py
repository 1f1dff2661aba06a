"""Megatron's DistributedDataParallel hooks each parameter's gradient accumulator with the hook
`_make_backward_post_hook(param)` makes: it adds the gradient to the parameter's `main_grad`
(a view of DDP's gradient buffer), drops `param.grad`, and with `overlap_grad_reduce` marks the
parameter ready, which starts its bucket's reduction once the bucket is complete. Declared to
layer replay (engine/layer_replay.py `gradient_hook`): a replayed block calls each parameter's
hook where the recorded block's ran, so a Megatron job's identical layers may be replayed.
Written for megatron-core 0.16-0.19, where the hook reads none of its arguments."""

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
        return replay.gradient_hook(param, original(self, param))

    plugin.patcher.setattr(cls, "_make_backward_post_hook", _make_backward_post_hook)


PATCHES = {"megatron.core.distributed.distributed_data_parallel": declare_gradient_hooks}
