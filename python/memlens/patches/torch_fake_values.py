"""Patches of `FakeTensor` as a Python object, for the ways training scripts print and save
tensors without thinking of them as device memory.

- `format(t, spec)` (`f"{loss:.4f}"`, `"{:.3f}".format(norm)`): `Tensor.__format__` formats a
  0-dim tensor's value only when `type(self) is Tensor`, so a fake one raises "unsupported format
  string passed to FakeTensor.__format__". Formatting reads the value as a real tensor's would
  (`.item()`), which answers the trace's placeholder and notes the line.
- pickling (`torch.save(model.state_dict(), path)`, checkpoints holding optimizer state): a
  fake tensor pickles its fake mode and fails on a `WeakValueDictionary`. It is written as a
  meta tensor instead: shape, stride, dtype and `requires_grad` kept, no data (a trace has
  none), and `torch.load` gives it back as a tensor of that shape. Saving allocates no device
  memory, so the trace's numbers do not change.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .patcher import Patcher


def _format(self: torch.Tensor, format_spec: str) -> str:
    if self.dim() == 0:
        return self.detach().item().__format__(format_spec)
    return object.__format__(self, format_spec)  # what a real tensor with dims does


def _reduce_ex(self: torch.Tensor, protocol: int):
    return (torch._utils._rebuild_meta_tensor_no_storage,
            (self.dtype, tuple(self.size()), tuple(self.stride()), self.requires_grad))


def apply(patcher: Patcher) -> None:
    patcher.setattr(FakeTensor, "__format__", _format)
    patcher.setattr(FakeTensor, "__reduce_ex__", _reduce_ex)
