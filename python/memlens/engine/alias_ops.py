"""`detach`, `alias` and the views of a fake tensor, answered without FakeTensorMode: a new fake
tensor on the same storage.

Every `nn.Parameter` made from a fake tensor detaches it twice, and memlens detaches each tensor
saved for backward (classifier.py); FakeTensorMode answers each one from its dispatch cache,
whose key it builds from the arguments every time. Where the answer cannot differ from the
cache's, it is made here as the cache makes it (an empty meta tensor set to the input's storage,
wrapped for the same device): a fake tensor of the trace's own mode, strided, of static shape,
holding no value FakeTensorMode keeps (`constant`) and neither conjugated nor negated.

The views a forward takes (`t` and `view` of every linear layer's weight and output, the
heads' `transpose`, `slice`, `unsqueeze`, `expand`, ...) are answered the way FakeTensorMode
answers them where it has no cached answer: the op's meta kernel run on the input inside
FakeTensorMode's kernel manager (where a fake tensor is its meta tensor), its result wrapped for
the input's device; with integer arguments only, and FakeTensorMode's own answer (and its error)
where the kernel refuses them. Anything else goes through FakeTensorMode as before; the
accountant treats the result the same either way (views allocate nothing).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import in_kernel_invocation_manager, unset_fake_temporarily

from .fake_tensors import make_fake
from .like_ops import plain_fake

aten = torch.ops.aten
_ALIASES = frozenset({aten.detach.default, aten.alias.default})
_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.t.default,
                    aten.transpose.int, aten.permute.default, aten.expand.default,
                    aten.unsqueeze.default, aten.squeeze.dim, aten.slice.Tensor, aten.select.int,
                    aten.as_strided.default})


def answered(func, args, kwargs, mode):
    """(True, result) when the op is done here; (False, None) when FakeTensorMode must run it."""
    view = func in _VIEWS
    if not view and (func not in _ALIASES or kwargs or len(args) != 1) or mode is None or \
            not args or not _plain(args[0], mode):
        return False, None
    if view:
        return _view(func, args, kwargs, mode)
    t = args[0]
    shape, stride, device = t.shape, t.stride(), t.device  # (meta inside the kernel manager)
    with unset_fake_temporarily(), in_kernel_invocation_manager(mode):
        meta = torch.empty_strided(shape, stride, dtype=t.dtype, device="meta")
        meta.set_(t.untyped_storage(), t.storage_offset(), shape, stride)
    return True, make_fake(mode, meta, device)


def _view(func, args, kwargs, mode):
    if kwargs or not all(_int_argument(a) for a in args[1:]):
        return False, None
    device = args[0].device
    with unset_fake_temporarily(), in_kernel_invocation_manager(mode):
        try:
            meta = func(*args)
        except Exception:  # noqa: BLE001 - FakeTensorMode's answer, and its error, then
            return False, None
    return True, make_fake(mode, meta, device)


def _plain(t, mode) -> bool:
    """A plain fake tensor of the trace's mode (like_ops.plain_fake) with no value of its own
    kept (`constant`), neither conjugated nor negated."""
    return plain_fake(t, mode) and t.constant is None and not t.is_conj() and not t.is_neg()


def _int_argument(a) -> bool:
    if isinstance(a, (list, tuple)):
        return all(type(n) is int for n in a)
    return a is None or type(a) is int
