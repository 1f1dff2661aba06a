"""In-place ops that cannot fail, answered without FakeTensorMode: an optimizer's foreach updates
(`_foreach_addcdiv_`, ...: its bulk), parameter initialisation (`normal_`, `zero_`), the
`zero_` of every `zeros_like`, pointwise in-place arithmetic.

They allocate nothing: the tensor they update is the result (a foreach op returns nothing).
FakeTensorMode still runs each one's meta kernel to check it, which for a Llama-7B step with
AdamW was about a third of a trace with layer replay. Where that check cannot fail, the op is
done here:

- the updated tensor (each of the first list's, for a foreach op) is a fake tensor of the
  trace's own mode, of a floating-point dtype, holding no value FakeTensorMode keeps
  (`constant`: it would have to forget it);
- every other tensor argument is one of the same mode on the same device, with the updated
  tensor's shape (a foreach list: position by position) and dtype, or a 0-dim one; for a
  single op any floating-point dtype (the kernel casts as it reads: Megatron's DDP hook adds
  each bf16 gradient into its fp32 `main_grad`, `copy_` casts); the other arguments are plain
  numbers (or lists of them);
- the op is a foreach op whose name ends in `_`, or an in-place op that writes its first
  argument and returns it and is pointwise, or one of the fills (`zero_`, `fill_`, `normal_`,
  `uniform_`) or a `copy_`.

Anything else (broadcasting, mixed devices, integer operands, host tensors, views that change shape,
`resize_`, `set_`) goes through FakeTensorMode as before, with its errors. The accountant books
the op the same way either way.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

_FILLS = frozenset({"zero_", "fill_", "normal_", "uniform_", "copy_"})
_KIND: dict = {}  # op -> "foreach", "single" or None


def kind(func) -> str | None:
    known = _KIND.get(func, False)
    if known is False:
        known = _KIND[func] = _kind(func)
    return known


def _kind(func) -> str | None:
    name = func._opname
    if func.namespace != "aten" or not name.endswith("_") or name.endswith("__"):
        return None
    if name.startswith("_foreach_"):
        return "foreach"
    schema = func._schema
    args, returns = schema.arguments, schema.returns
    writes_self = bool(args) and args[0].alias_info is not None and args[0].alias_info.is_write
    returns_self = len(returns) == 1 and returns[0].alias_info is not None and \
        returns[0].alias_info.is_write
    if writes_self and returns_self and \
            (name in _FILLS or torch.Tag.pointwise in func.tags):
        return "single"
    return None


def answered(func, args, kwargs, mode):
    """(True, result) when the op is done here; (False, None) when FakeTensorMode must run it."""
    which = kind(func)
    if which is None or mode is None or not args:
        return False, None
    if kwargs and any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return False, None
    if which == "foreach":
        return (True, None) if _foreach_checked(args, mode) else (False, None)
    self = args[0]
    if not _updatable(self, mode):
        return False, None
    for arg in args[1:]:
        if isinstance(arg, torch.Tensor):
            if not _alike(arg, self, mode, any_float=True):
                return False, None
        elif not _number(arg):
            return False, None
    return True, self


def _updatable(t, mode) -> bool:
    return isinstance(t, FakeTensor) and t.fake_mode is mode and t.constant is None and \
        t.dtype.is_floating_point


def _alike(t, like, mode, any_float: bool = False) -> bool:
    if not isinstance(t, FakeTensor) or t.fake_mode is not mode or t.device != like.device:
        return False
    if t.dim() == 0:
        return not t.dtype.is_complex  # a scalar tensor of the device
    same_dtype = t.dtype == like.dtype or (any_float and t.dtype.is_floating_point)
    return same_dtype and t.shape == like.shape


def _number(v) -> bool:
    return v is None or isinstance(v, (int, float, bool))


def _foreach_checked(args, mode) -> bool:
    first = args[0]
    if not isinstance(first, (list, tuple)) or not first:
        return False
    if not all(_updatable(t, mode) and t.device == first[0].device for t in first):
        return False
    return foreach_operands(args[1:], first, lambda t, s: _same(t, s, mode),
                            lambda t: t.dim() == 0 and _alike(t, first[0], mode))


def foreach_operands(rest, first, same, tensor_operand) -> bool:
    """Whether a foreach op's operands after its first list are lists of that length (of
    tensors `same(tensor, its counterpart)`, or of numbers), numbers, or tensors
    `tensor_operand` accepts (like_ops.py checks its ops' operands with it too)."""
    for arg in rest:
        if isinstance(arg, (list, tuple)):
            if len(arg) != len(first):
                return False
            if arg and isinstance(arg[0], torch.Tensor):
                if not all(same(t, s) for s, t in zip(first, arg)):
                    return False
            elif not all(_number(v) for v in arg):
                return False
        elif isinstance(arg, torch.Tensor):
            if not tensor_operand(arg):
                return False
        elif not _number(arg):
            return False
    return True


def _same(t, like, mode) -> bool:
    return isinstance(t, FakeTensor) and t.fake_mode is mode and t.device == like.device and \
        t.dtype == like.dtype and t.shape == like.shape
