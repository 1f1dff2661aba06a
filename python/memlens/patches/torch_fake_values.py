"""Pickling fake tensors, for the checkpoints training scripts write.

`torch.save(model.state_dict(), path)` (and checkpoints holding optimizer and scaler state)
pickles each tensor; a fake tensor pickles its fake mode and fails on a `WeakValueDictionary`
("Can't pickle local object 'WeakValueDictionary.__init__.<locals>.remove'"). It is written as a
meta tensor instead: shape, stride, dtype and `requires_grad` kept, no data (a trace has none),
and `torch.load` gives it back as a tensor of that shape. Saving allocates no device memory, so
the trace's numbers do not change. (`f"{loss:.4f}"` of a fake tensor: torch_core.py.)
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .patcher import Patcher


def _reduce_ex(self: torch.Tensor, protocol: int):
    return (torch._utils._rebuild_meta_tensor_no_storage,
            (self.dtype, tuple(self.size()), tuple(self.stride()), self.requires_grad))


def apply(patcher: Patcher) -> None:
    patcher.setattr(FakeTensor, "__reduce_ex__", _reduce_ex)
