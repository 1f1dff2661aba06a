"""Embedding on the CPU (aten/src/ATen/native/Embedding.cpp).

`embedding` looks up `weight.index_select(0, indices.reshape(-1))`: reshaping indices that are
not viewable as one dimension (e.g. position ids expanded over the batch) copies them, before the
output. `embedding_dense_backward_cpu` makes `indices.contiguous()` and `grad.contiguous()`
before it allocates grad_weight."""

from __future__ import annotations

import torch


def _flat_copy(t: torch.Tensor) -> int:
    """Bytes `t.reshape(-1)` copies: 0 when the dims (size-1 ones aside) nest like a
    contiguous tensor's, so that a view suffices."""
    dims = [(n, s) for n, s in zip(t.shape, t.stride()) if n != 1]
    if all(s == dims[i + 1][0] * dims[i + 1][1] for i, (_, s) in enumerate(dims[:-1])):
        return 0
    return t.numel() * t.element_size()


def embedding(args, kwargs, out):
    return [_flat_copy(args[1])]


def embedding_dense_backward(args, kwargs, out):
    grad, indices = args[0], args[1]
    sizes = [0 if indices.is_contiguous() else indices.numel() * indices.element_size(),
             0 if grad.is_contiguous() else grad.numel() * grad.element_size()]
    return [n for n in sizes if n]
