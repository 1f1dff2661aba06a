"""New tensors made from sizes alone, answered without FakeTensorMode: `torch.empty`,
`empty_strided`, `zeros`, `ones` and `full` on a device named in the call (each parameter a
model makes, each buffer of its forward).

FakeTensorMode answers a constructor by running it on the meta device and wrapping the result
as a fake tensor of the device asked for (fake_impls.constructors), after working out a cache
key, looking it up and checking the op: for a Llama-7B step with layer replay, the 600 it makes
took about a tenth of FakeTensorMode's time. Where nothing else can change the answer, it is
made here the same way:

- static integer sizes (and strides), a strided layout, no pinned memory;
- the device given in the call (with none, a constructor makes a host tensor, which the trace
  may compute for real: host_compute.py decides that before this is asked).

Anything else goes through FakeTensorMode as before. The accountant books the result the same
way either way.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from .fake_tensors import make_fake

aten = torch.ops.aten
_FACTORIES = frozenset({aten.empty.memory_format, aten.empty_strided.default,
                        aten.zeros.default, aten.ones.default, aten.full.default})
_KWARGS = frozenset({"dtype", "layout", "device", "pin_memory", "memory_format"})
_META = torch.device("meta")


def answered(func, args, kwargs, mode):
    """(True, result) when the op is done here; (False, None) when FakeTensorMode must run it."""
    if func not in _FACTORIES or mode is None or not args:
        return False, None
    device = kwargs.get("device")
    if device is None or not set(kwargs) <= _KWARGS or kwargs.get("pin_memory") or \
            kwargs.get("layout") not in (None, torch.strided):
        return False, None
    sizes = args[1:2] if func is aten.empty_strided.default else ()
    if not all(_ints(s) for s in (args[0], *sizes)):
        return False, None
    if func is aten.full.default and (len(args) != 2 or
                                      not isinstance(args[1], (int, float, bool))):
        return False, None
    with unset_fake_temporarily():
        meta = func(*args, **{**kwargs, "device": _META})
    return True, make_fake(mode, meta, torch.device(device))


def empty_strided(mode, shape, stride, dtype: torch.dtype, device: torch.device) -> FakeTensor:
    """A new fake tensor of `mode`, as `torch.empty_strided` under it makes one (a replayed
    block's outputs and gradients: replayed_block.make_tensor).

    Called outside any mode's dispatch, where the accountant is still active: with every
    mode and subclass off, the meta tensor is made by the meta kernel alone (through the
    modes it became a fake tensor of its own, which FakeTensor() then detached through
    FakeTensorMode: a third of a replayed block's cost)."""
    with torch._C._DisableTorchDispatch():
        meta = torch.empty_strided(shape, stride, dtype=dtype, device=_META)
    return make_fake(mode, meta, device)


def _ints(sizes) -> bool:
    return isinstance(sizes, (list, tuple)) and all(type(n) is int for n in sizes)
