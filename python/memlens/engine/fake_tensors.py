"""Fake tensors for the fast paths: `FakeTensor(mode, meta, device)` without its checks.

`FakeTensor.__new__` checks its arguments, normalises the device (initialising the GPU context)
and sets a dozen fields one by one through descriptors: about 10 us, more than the rest of a
fast path's answer, thousands of times a step. The fast paths (like_ops, alias_ops, factory_ops,
a replayed block's tensors) pass a fresh meta tensor, the trace's mode and a device, so every
field but the storage is the same for one (mode, device): they are copied from the first tensor
`FakeTensor()` made for it, whatever fields this torch version sets. That first tensor is
checked against one made the fast way (dispatch keys, fields, device); where they differ,
`FakeTensor()` makes every one. A device without an index (`cuda`) is the current one's, asked
each time as FakeTensor asks it.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorConfig

_FIELDS = "_memlens_fake_fields"  # on the mode: device -> the fields, or None (not fast)
_make_subclass = torch.Tensor._make_subclass
_dispatch_keys = torch._C._dispatch_keys


def make_fake(mode, meta: torch.Tensor, device: torch.device) -> FakeTensor:
    """What `FakeTensor(mode, meta, device)` makes, for a fresh meta tensor `meta`."""
    if device.index is None and device.type != "cpu":
        device = FakeTensor._normalize_fake_device(device)
    templates = mode.__dict__.get(_FIELDS)
    if templates is None:
        templates = mode.__dict__[_FIELDS] = {}
    fields = templates.get(device, False)
    if fields is False:
        made = FakeTensor(mode, meta, device)
        templates[device] = _learned(mode, made, device)
        return made
    if fields is None:
        return FakeTensor(mode, meta, device)
    return _fast(mode, meta, device, fields)


def _fast(mode, meta, device, fields) -> FakeTensor:
    t = _make_subclass(FakeTensor, meta, meta.requires_grad, dispatch_device=True,
                       device_for_backend_keys=device)
    if mode._allow_unsafe_data_ptr_access:
        torch._C._set_warn_deprecated_on_mutable_data_ptr(t)
    else:
        torch._C._set_throw_on_mutable_data_ptr(t)
    t.__dict__.update(fields)
    return t


def _learned(mode, made: FakeTensor, device: torch.device) -> dict | None:
    """The fields to copy, where a tensor made the fast way is the one FakeTensor() made."""
    if FakeTensorConfig.debug or made.fake_device != device:
        return None
    fields = dict(made.__dict__)
    with torch._C._DisableTorchDispatch():
        meta = torch.empty(made.shape, dtype=made.dtype, device="meta")
    probe = _fast(mode, meta, device, fields)
    same = _dispatch_keys(probe) == _dispatch_keys(made) and probe.__dict__ == made.__dict__ \
        and probe.device == made.device and type(probe) is type(made)
    return fields if same else None
