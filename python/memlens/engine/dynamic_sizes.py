"""Ops whose result's size depends on tensor values, on fake tensors: the size a trace uses.

A memory trace has no values, so `x[mask]`, `mask.nonzero()` or `torch.unique(ids)` cannot know
how many elements come out. Each of them has a bound (at most every element of the input), and
the trace sizes the result by a policy the user picks:

- `bound` (the default): the upper bound, so the estimate errs on the side of memory;
- a fraction in (0, 1]: that share of the bound, rounded up (`0.5`: half the elements kept);
- `error`: stop with an error naming the op and the line.

An op with no bound (`repeat_interleave` by a tensor of repeats, `bincount` without
`minlength`) is always an error. (torch is imported lazily: the CLI parses the policy before
torch may be imported.)
"""

from __future__ import annotations

import functools
import math

POLICIES = ("bound", "error")


def parse_policy(text: str) -> str:
    """'bound', 'error' or a fraction in (0, 1]; raises ValueError otherwise."""
    if text in POLICIES:
        return text
    try:
        fraction = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not bound, error or a fraction in (0, 1]") from None
    if not 0 < fraction <= 1:
        raise ValueError(f"{text!r} is not a fraction in (0, 1]")
    return text


def _kept(bound: int, policy: str) -> int:
    if policy == "bound":
        return bound
    return math.ceil(bound * float(policy))


def _empty(shape, like, dtype=None):
    import torch

    return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)


# Each sizer: (args, kwargs, kept) -> (result, bound, size used, bytes of the kernel's own
# temporaries), or None where the op has no bound; `kept(bound)` is the policy's size.
def _nonzero(args, kwargs, kept):
    import torch

    x = args[0]
    k = kept(x.numel())
    return _empty((k, x.dim()), x, torch.int64), x.numel(), k, 0


def _masked_select(args, kwargs, kept):
    import torch

    x, mask = args[0], args[1]
    bound = torch.broadcast_shapes(x.shape, mask.shape).numel()
    k = kept(bound)
    return _empty((k,), x), bound, k, 0


def _index(args, kwargs, kept):
    """`x[mask]` (with any mix of boolean masks and integer indices): each mask becomes the
    integer indices of its kept elements, as in ATen (`mask.nonzero()`, a (k, mask.dim())
    int64 tensor alive while the indexing runs), then the ordinary indexing runs."""
    import torch

    x, indices = args[0], list(args[1])
    bound = index_bytes = 0
    for i in reversed(range(len(indices))):
        m = indices[i]
        if m is not None and m.dtype in (torch.bool, torch.uint8):
            bound = max(bound, m.numel())
            k = kept(m.numel())
            index_bytes += k * m.dim() * 8
            indices[i:i + 1] = [_empty((k,), m, torch.int64) for _ in range(m.dim())]
    if not bound:
        return None
    return torch.ops.aten.index.Tensor(x, indices), bound, kept(bound), index_bytes


def _unique(args, kwargs, kept, consecutive=False):
    """_unique2 / unique_consecutive: (values, inverse, counts), as the kernel returns them
    (an empty inverse or counts when not asked for)."""
    import torch

    x = args[0]
    first = 1 if consecutive else 2  # where return_inverse sits among the positional args
    return_inverse = kwargs.get("return_inverse", args[first] if len(args) > first else False)
    return_counts = kwargs.get("return_counts",
                               args[first + 1] if len(args) > first + 1 else False)
    k = kept(x.numel())
    values = _empty((k,), x)
    inverse = _empty(x.shape if return_inverse else (0,), x, torch.int64)
    counts = _empty((k if return_counts else 0,), x, torch.int64)
    return (values, inverse, counts), x.numel(), k, 0


def _bincount(args, kwargs, kept):
    import torch

    minlength = kwargs.get("minlength", args[2] if len(args) > 2 else 0)
    if not minlength:
        return None
    weights = kwargs.get("weights", args[1] if len(args) > 1 else None)
    dtype = torch.float64 if weights is not None else torch.int64
    if weights is not None and weights.dtype == torch.float32:
        dtype = torch.float32
    # Values below `minlength` (the usual idiom: expert ids, class ids): `minlength` bins.
    return _empty((minlength,), args[0], dtype), minlength, minlength, 0


@functools.cache
def _sizers() -> dict:
    import torch

    aten = torch.ops.aten
    return {
        aten.nonzero.default: _nonzero,
        aten.masked_select.default: _masked_select,
        aten._unique2.default: _unique,
        aten.unique_consecutive.default: lambda a, kw, kept: _unique(a, kw, kept, True),
        aten.index.Tensor: _index,
        aten.bincount.default: _bincount,
    }


def has_bound(func) -> bool:
    return func in _sizers()


def bounded_result(func, args, kwargs, policy: str):
    """(result, bound, size used, bytes of the kernel's temporaries) for an op with a bound
    under `policy`, or None when the op has no bound or the policy is `error`."""
    sizer = _sizers().get(func)
    if policy == "error" or sizer is None:
        return None
    return sizer(args, kwargs, lambda bound: _kept(bound, policy))
