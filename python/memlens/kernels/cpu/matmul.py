"""Low-precision matmuls on the CPU: the scratchpad of the oneDNN matmul primitive.

aten/src/ATen/native/LinearAlgebra.cpp (`addmm_impl_cpu_`, `bmm_out_or_baddbmm_`) hands bf16
and fp16 products to `mkldnn_matmul` (aten/src/ATen/native/mkldnn/Matmul.cpp) when
`use_mkldnn_matmul` holds: the dtype is supported by the CPU (`mkldnn_bf16_device_check`,
`mkldnn_fp16_device_check`), oneDNN is enabled, and `checksize` finds the product larger than
16*16*16 (m*k*n, times the batch for bmm). `mkldnn_matmul` copies an operand that is neither
contiguous nor transposed in its last two dims (`.contiguous()`), then ideep
`matmul_forward::compute` runs one oneDNN matmul with the plain strided descriptors; addmm and
baddbmm first copy `self` into the output and accumulate with a sum post-op. The only buffer
is the user-managed scratchpad, allocated after the output and freed before the op returns; its
size is oneDNN's (brgemm blocking: copies of A/B panels, fp32 accumulators, AMX tile buffers,
per thread), so it is queried from oneDNN (`onednn.matmul`).

fp32 products go to MKL's sgemm, whose buffers are not the CPU allocator's: no rule.
"""

from __future__ import annotations

import functools

import torch

from . import onednn
from .onednn import Memory

_CHECKSIZE = 16 * 16 * 16


def _supported(dtype: torch.dtype) -> bool:
    if not (onednn.available() and torch.backends.mkldnn.is_available()
            and torch._C._get_mkldnn_enabled()):
        return False
    return _host_supports(dtype)


@functools.lru_cache(maxsize=None)
def _host_supports(dtype: torch.dtype) -> bool:
    """Whether this CPU has oneDNN's bf16/fp16 matmul: a fact of the host, asked once (each ask
    is an op call through fake mode and the accountant, half a millisecond per matmul)."""
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return False


def _optimized(t: torch.Tensor) -> bool:
    """is_mkldnn_optimized_format: contiguous, or transposed in the last two dims."""
    if t.is_contiguous():
        return True
    size, stride = t.shape, t.stride()
    if t.dim() == 2:
        return stride[0] == 1 and stride[1] == size[0]
    return stride[0] == size[1] * size[2] and stride[1] == 1 and stride[2] == size[1]


def _contiguous(t: torch.Tensor) -> Memory:
    strides, acc = [], 1
    for d in reversed(t.shape):
        strides.append(acc)
        acc *= max(d, 1)
    return Memory(tuple(t.shape), str(t.dtype).replace("torch.", ""), tuple(reversed(strides)))


def _rule(mat1, mat2, result, beta) -> list[int] | None:
    if not isinstance(result, torch.Tensor) or result.dtype != mat1.dtype:
        return None
    if mat1.dtype != mat2.dtype or not _supported(mat1.dtype):
        return None
    if mat1.numel() == 0 or mat2.numel() == 0:
        return None
    if mat1.dim() == 2 and mat1.shape[0] * mat1.shape[1] * mat2.shape[1] <= _CHECKSIZE:
        return None
    if mat1.dim() == 3 and mat1.shape[0] * mat1.shape[1] * mat1.shape[2] * mat2.shape[2] \
            <= _CHECKSIZE:
        return None
    sizes = []
    operands = []
    for t in (mat1, mat2):
        if _optimized(t):
            operands.append(Memory.of(t))
        else:
            sizes.append(t.numel() * t.element_size())  # the .contiguous() copy
            operands.append(_contiguous(t))
    prim = onednn.matmul(operands[0], operands[1], Memory.of(result), beta != 0)
    return sizes + [prim.nbytes("scratchpad")]


def mm(args, kwargs, out):
    return _rule(args[0], args[1], out, 0)


def addmm(args, kwargs, out):
    beta = args[3] if len(args) > 3 else kwargs.get("beta", 1)
    return _rule(args[1], args[2], out, beta)


def bmm(args, kwargs, out):
    return _rule(args[0], args[1], out, 0)


def baddbmm(args, kwargs, out):
    beta = args[3] if len(args) > 3 else kwargs.get("beta", 1)
    return _rule(args[1], args[2], out, beta)
