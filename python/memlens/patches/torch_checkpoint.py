"""Tensors activation checkpointing keeps for backward are activations.

Checkpointing's saved-tensor hooks replace the tracer's inside a checkpointed region, so what it
keeps was never seen being saved for backward and stayed temporaries:
- selective checkpointing (`create_selective_checkpoint_contexts`) keeps the outputs of the ops
  its policy saves (MUST_SAVE / PREFER_SAVE) in a storage of its own, each wrapped in
  `_VersionWrapper` (which wraps nothing else), until backward replays them;
- non-reentrant checkpointing recomputes the region in backward and keeps what the recomputed
  ops save through `_recomputation_hook`'s pack hook, until the region's backward has used it.
Each tensor either takes is reported as saved.
"""

from __future__ import annotations

import torch

from .patcher import Patcher, check_tested


def apply(patcher: Patcher, mark_saved) -> None:
    """`mark_saved(tensor)`: the tensor is held for backward."""
    check_tested("torch_checkpoint", torch.__version__)
    from torch.utils import checkpoint

    wrapper = getattr(checkpoint, "_VersionWrapper", None)
    if wrapper is None:  # a torch without selective checkpointing's cache
        return
    original = wrapper.__init__

    def __init__(self, val, *args, **kwargs):
        original(self, val, *args, **kwargs)
        if isinstance(val, torch.Tensor):
            mark_saved(val)

    patcher.setattr(wrapper, "__init__", __init__)

    recomputation = getattr(checkpoint, "_recomputation_hook", None)
    if recomputation is None:
        return
    original_hook_init = recomputation.__init__

    def hook_init(self, *args, **kwargs):
        original_hook_init(self, *args, **kwargs)
        pack = self.pack_hook  # saved_tensors_hooks pushes these two on __enter__

        def pack_hook(x):
            mark_saved(x)
            return pack(x)

        self.pack_hook = pack_hook

    patcher.setattr(recomputation, "__init__", hook_init)
