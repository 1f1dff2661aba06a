"""New tensors shaped like their input, answered without FakeTensorMode: the `*_like`
constructors (an optimizer's states: `zeros_like` of every parameter) and the out-of-place
foreach ops of an optimizer's step (`_foreach_sqrt` of every second moment).

Each is a new tensor whose metadata follows from its input's alone. FakeTensorMode works it out
by running the op on meta tensors, which for a Llama-7B step with layer replay was about a fifth
of the trace (as in-place ops were: inplace_ops.py). Where the answer cannot differ, it is made
here, a fake tensor of the trace's own mode on a meta storage:

- `empty_like`, `zeros_like`, `ones_like`, `full_like` of a fake tensor of the mode, with no
  layout, device or pinning asked other than the input's, contiguous or asked for contiguous
  memory: a contiguous tensor of its shape, of the dtype asked;
- an out-of-place foreach op of the elementwise ones below (`_foreach_sqrt`, `_foreach_add`,
  ...), on a list of contiguous floating-point fake tensors of the mode on one device, with
  scalars, lists of scalars or more lists of tensors of the same shapes and dtypes (no 0-dim
  tensor operands): one new contiguous tensor of the same shape and dtype per input.

Anything else (symbolic shapes, other layouts, type promotion, broadcasting, host tensors) goes
through FakeTensorMode as before. The accountant books the result the same way either way.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from .fake_tensors import make_fake
from .inplace_ops import foreach_operands

aten = torch.ops.aten
_LIKE = frozenset({aten.empty_like.default, aten.zeros_like.default, aten.ones_like.default,
                   aten.full_like.default})
_LIKE_KWARGS = frozenset({"dtype", "layout", "device", "pin_memory", "memory_format"})
# Elementwise foreach ops (`_foreach_<name>`) whose result has each input's shape and, for
# floating-point inputs and number operands, its dtype.
_ELEMENTWISE = frozenset({
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
    "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
    "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "add", "sub",
    "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow", "lerp", "addcdiv",
    "addcmul", "copy"})
_FOREACH: dict = {}  # op -> whether it is one of them, out of place


def answered(func, args, kwargs, mode):
    """(True, result) when the op is done here; (False, None) when FakeTensorMode must run it."""
    if mode is None or not args:
        return False, None
    if func in _LIKE:
        out = _like(func, args, kwargs, mode)
        return (False, None) if out is None else (True, out)
    if _is_foreach(func) and set(kwargs) <= {"alpha"} and \
            all(isinstance(v, (int, float)) for v in kwargs.values()) and \
            _foreach_checked(args, mode):
        with unset_fake_temporarily():
            return True, [_new(t, mode, t.dtype) for t in args[0]]
    return False, None


def _like(func, args, kwargs, mode):
    self = args[0]
    extra = args[1:]
    if func is aten.full_like.default:
        if len(extra) != 1 or not isinstance(extra[0], (int, float, bool)):
            return None
    elif extra:
        return None
    if not plain_fake(self, mode) or not set(kwargs) <= _LIKE_KWARGS:
        return None
    if kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        return None
    device = kwargs.get("device")
    if device is not None and torch.device(device) != self.device:
        return None
    memory_format = kwargs.get("memory_format")
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        return None
    if memory_format is not torch.contiguous_format and not self.is_contiguous():
        return None  # preserve_format: FakeTensorMode works out the strides
    with unset_fake_temporarily():
        return _new(self, mode, kwargs.get("dtype") or self.dtype)


def _is_foreach(func) -> bool:
    known = _FOREACH.get(func)
    if known is None:
        name = func._opname
        known = _FOREACH[func] = func.namespace == "aten" and \
            name.removeprefix("_foreach_") in _ELEMENTWISE and name.startswith("_foreach_")
    return known


def _foreach_checked(args, mode) -> bool:
    first = args[0]
    if not isinstance(first, (list, tuple)) or not first:
        return False
    device = first[0].device
    if not all(plain_fake(t, mode) and t.dtype.is_floating_point and t.device == device
               and t.is_contiguous() for t in first):
        return False
    return foreach_operands(
        args[1:], first, lambda t, s: plain_fake(t, mode) and t.device == device and
        t.dtype == s.dtype and t.shape == s.shape, lambda t: False)


def plain_fake(t, mode) -> bool:
    """A fake tensor of the trace's mode with a static shape and a strided layout."""
    return type(t) is FakeTensor and t.fake_mode is mode and t.layout is torch.strided and \
        all(type(n) is int for n in t.shape)


def _new(like: torch.Tensor, mode, dtype: torch.dtype) -> FakeTensor:
    """A new contiguous fake tensor of `like`'s shape and device (called with the trace's
    FakeTensorMode unset, so that the meta tensor is made by PyTorch, not by the mode)."""
    meta = torch.empty(like.shape, dtype=dtype, device="meta")
    return make_fake(mode, meta, like.device)
