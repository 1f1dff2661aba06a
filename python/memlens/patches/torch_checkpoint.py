"""Tensors kept by selective activation checkpointing are activations.

`torch.utils.checkpoint.create_selective_checkpoint_contexts` keeps the outputs of the ops its
policy saves (MUST_SAVE / PREFER_SAVE) in a storage of its own, wrapped in `_VersionWrapper`,
until backward replays them. Checkpointing's saved-tensor hooks replace the tracer's inside the
region, so these tensors were never seen being saved for backward and stayed temporaries.
`_VersionWrapper` wraps only those tensors (torch/utils/checkpoint.py, the caching mode's
`__torch_dispatch__`): each one it wraps is reported as saved.
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
