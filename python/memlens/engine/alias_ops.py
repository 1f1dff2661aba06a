"""`detach` and `alias` of a fake tensor, answered without FakeTensorMode: a new fake tensor on
the same storage, with the same shape, strides and offset.

Every `nn.Parameter` made from a fake tensor detaches it twice, and memlens detaches each tensor
saved for backward (classifier.py); FakeTensorMode answers each one from its dispatch cache,
whose key it builds from the arguments every time. Where the answer cannot differ from the
cache's, it is made here as the cache makes it (an empty meta tensor set to the input's storage,
wrapped for the same device): a fake tensor of the trace's own mode, strided, of static shape,
holding no value FakeTensorMode keeps (`constant`) and neither conjugated nor negated. Anything
else goes through FakeTensorMode as before; the accountant treats the result the same either
way (views allocate nothing).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import (FakeTensor, in_kernel_invocation_manager,
                                           unset_fake_temporarily)

_ALIASES = frozenset({torch.ops.aten.detach.default, torch.ops.aten.alias.default})


def answered(func, args, kwargs, mode):
    """(True, result) when the op is done here; (False, None) when FakeTensorMode must run it."""
    if func not in _ALIASES or mode is None or kwargs or len(args) != 1:
        return False, None
    t = args[0]
    if type(t) is not FakeTensor or t.fake_mode is not mode or t.constant is not None or \
            t.layout is not torch.strided or t.is_conj() or t.is_neg() or \
            not all(type(n) is int for n in t.shape):
        return False, None
    shape, stride, device = t.shape, t.stride(), t.device  # (meta inside the kernel manager)
    with unset_fake_temporarily(), in_kernel_invocation_manager(mode):
        meta = torch.empty_strided(shape, stride, dtype=t.dtype, device="meta")
        meta.set_(t.untyped_storage(), t.storage_offset(), shape, stride)
    return True, FakeTensor(mode, meta, device)
