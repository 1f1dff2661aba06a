"""`logsumexp`'s temporaries (aten/src/ATen/native/ReduceOps.cpp `logsumexp_out_impl`, the same
code on every device): the row maxima (`amax`, keepdim), their absolute values and a boolean
`== inf` of them (to zero infinite maxima), then `self - maxes`, a copy the size of the input,
exponentiated in place and summed into the result, which is allocated last. On the CPU the
Python number `inf` is wrapped into a 0-dim double and cast to the input's dtype for the
comparison (TensorIterator, as `kernels/cpu/scalars.py`); on a GPU a CPU scalar is read by the
kernel, and nothing is allocated for it.

Measured on the CPU allocator (torch 2.13; fp32 over the last dim and over dims 0 and 2, bf16
over the last dim): amax, abs, the scalar and its cast, eq; those four freed; sub; the result
(from `sum`); sub and amax freed. Not modelled: a bf16 or fp16 input reduced over other dims
than the last, whose `sum` on the CPU also makes an fp32 copy of the copy and an fp32 result
(the reduction's own, as for any such `sum`).
"""

from __future__ import annotations

import torch

from .plan import Plan


def _rows(x: torch.Tensor, dims) -> int:
    """The elements of the maxima: the input's, less the reduced dims."""
    dims = [dims] if isinstance(dims, int) else list(dims or ())
    reduced = {d % max(x.dim(), 1) for d in dims} if dims else set(range(x.dim()))
    n = 1
    for d, size in enumerate(x.shape):
        if d not in reduced:
            n *= size
    return n


def plan(args, kwargs, out, wrapped_scalar: bool) -> Plan | None:
    x = args[0]
    if not isinstance(x, torch.Tensor) or x.numel() == 0 or x.is_complex():
        return None
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    es = x.element_size()
    rows = _rows(x, dims)
    p = Plan()
    maxes = p.alloc(rows * es)
    absolute = p.alloc(rows * es)
    scalars = [p.alloc(8), p.alloc(es)] if wrapped_scalar else []
    infinite = p.alloc(rows)  # bool
    p.free(*scalars, infinite, absolute)
    shifted = p.alloc(x.numel() * es)
    p.outputs(0)
    p.free(shifted, maxes)
    return p


def cpu(args, kwargs, out) -> Plan | None:
    return plan(args, kwargs, out, wrapped_scalar=True)


def cuda(args, kwargs, out) -> Plan | None:
    return plan(args, kwargs, out, wrapped_scalar=False)
