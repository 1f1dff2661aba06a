"""Operand promotion in CPU tensor arithmetic (TensorIterator).

A Python number passed where an op takes a Tensor (`x.mul_(0.9)` calls `mul_.Tensor`) is wrapped
by the argument parser into a 0-dim CPU tensor (int64, double, complex double or bool) for the
duration of the op; the `.Scalar` overloads and `mean` (which divides by the element count) wrap
inside the op (python_arg_parser.cpp `scalar_to_tensor`, `wrapped_scalar_tensor`).
TensorIteratorBase::compute_types then casts every input whose dtype differs from the common
dtype into a temporary of that dtype (the input's own shape, before the output is allocated):
the wrapped scalar, a 0-dim tensor of another dtype, or a whole bf16 tensor added to an fp32
one. A bf16/fp16 `mean` sums in fp32: an fp32 copy of the input and an fp32 result, then the
division by the wrapped count (ReduceOps.cpp `mean_out`)."""

from __future__ import annotations


import torch

from ..plan import Plan

_WRAPPED = {bool: (torch.bool, 1), int: (torch.int64, 8), float: (torch.float64, 8),
            complex: (torch.complex128, 16)}


def _operand(value, common: torch.dtype) -> list[int]:
    if isinstance(value, torch.Tensor):
        if value.dtype == common:
            return []
        return [max(value.numel(), 1) * common.itemsize]
    kind = _WRAPPED.get(type(value))
    if kind is None:
        return []
    wrapped, size = kind
    return [size] if wrapped == common else [size, common.itemsize]


def binary(args, kwargs, out):
    """add/sub/mul/div (Tensor and Scalar overloads, in place or not)."""
    if len(args) < 2 or not isinstance(out, torch.Tensor):
        return None
    return _operand(args[0], out.dtype) + _operand(args[1], out.dtype) or None


def mean(args, kwargs, out):
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        return None
    x = args[0]
    if x.dtype in (torch.bfloat16, torch.float16) and out.dtype == x.dtype:
        plan = Plan()
        result = plan.alloc(max(out.numel(), 1) * 4)
        plan.free(plan.alloc(x.numel() * 4))
        plan.free(*[plan.alloc(n) for n in _operand(1, torch.float32)], result)
        return plan
    return _operand(1, out.dtype)
