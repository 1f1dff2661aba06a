"""`torch.utils.checkpoint.checkpoint(block, ...)`, heard: layer replay takes a checkpointed call
of one of its blocks (a model that checkpoints each block from its own forward loop) as that
block's call, so that the whole checkpointed region, recomputation and all, is what is recorded
and replayed (engine/layer_replay.py). Every other call runs as it was."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .patcher import Patcher, check_tested

# checkpoint()'s own keyword arguments; the rest are the function's
OPTIONS = ("use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug",
           "early_stop")


def apply(patcher: Patcher, on_call: Callable[..., Any]) -> None:
    """`on_call(function, run, args, kwargs)`: `run()` is the checkpoint as called; `args` and
    `kwargs` are the function's."""
    check_tested("torch_checkpoint", torch.__version__)
    from torch.utils import checkpoint as module

    original = module.checkpoint

    def checkpoint(function, *args, **kwargs):
        own = {k: v for k, v in kwargs.items() if k not in OPTIONS}
        return on_call(function, lambda: original(function, *args, **kwargs), args, own)

    checkpoint.__wrapped__ = original
    checkpoint.__doc__ = original.__doc__
    patcher.setattr(module, "checkpoint", checkpoint)
