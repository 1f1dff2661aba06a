"""`torch._grouped_mm` on float32 and float16, as CUDA runs it.

Mixture-of-experts layers call `F.grouped_mm` (transformers' default experts path on a GPU of
compute capability 8.0 or more). On CUDA, `_grouped_mm_cuda` takes its CUTLASS kernel for
bfloat16 and otherwise its fallback (aten/src/ATen/native/GroupedMMUtils.h): one `mm_out` per
group into slices of the output, so the output is all it allocates. torch's Meta kernel (2.13
and 2.14) accepts only bfloat16 (2.14: and float16), so an fp32 model under autocast, whose
experts' weights stay fp32, stopped a trace with "Expected inputs of BF16 type". While a CUDA
target is traced, the Meta kernel takes what `_grouped_mm_validate_inputs` takes and makes the
output `create_grouped_gemm_output_tensor` makes (its last dimension's stride padded to 16
bytes); bfloat16 still goes to torch's own. Registered only where torch's refuses float32.
"""

from __future__ import annotations

import torch

from .patcher import Patcher

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _refuses_float32(meta) -> bool:
    a = torch.empty(4, 8, device="meta")
    b = torch.empty(2, 8, 4, device="meta")
    try:
        meta(a, b, torch.empty(2, dtype=torch.int32, device="meta"))
    except RuntimeError:
        return True
    return False


def _output(mat_a, mat_b, offs, dtype):
    """create_grouped_gemm_output_tensor: shape by case, the last stride padded to 16 bytes."""
    a_2d, b_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if a_2d and b_2d:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a_2d:
        torch._check(offs.size(0) == mat_b.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b_2d:
        torch._check(offs.size(0) == mat_a.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        torch._check(mat_a.size(0) == mat_b.size(0), lambda: "batched dimension has to match")
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    alignment = 16 // dtype.itemsize
    padded = (size[-1] + alignment - 1) // alignment * alignment
    stride = [padded, 1] if a_2d != b_2d else [size[1] * padded, padded, 1]
    return mat_a.new_empty_strided(size, stride, dtype=dtype)


def apply(patcher: Patcher) -> None:
    from torch._meta_registrations import meta_grouped_mm  # torch's own, for bfloat16

    if not _refuses_float32(meta_grouped_mm):
        return

    def grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        if mat_a.dtype == mat_b.dtype == torch.bfloat16 and out_dtype in (None, torch.bfloat16):
            return meta_grouped_mm(mat_a, mat_b, offs, bias, out_dtype)
        torch._check(mat_a.dtype in _FLOATS and mat_b.dtype in _FLOATS, lambda: (
            f"Expected mat_a and mat_b to be Float32, BFloat16 or Float16 matrices, got "
            f"{mat_a.dtype} and {mat_b.dtype}"))
        torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                     lambda: "mat_a and mat_b have to be 2 or 3d")
        if mat_a.dim() == 3 or mat_b.dim() == 3:
            torch._check(mat_a.size(-1) == mat_b.size(-2),
                         lambda: "contraction dimension of mat_a and mat_b must match")
        torch._check((offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2), lambda: (
            "Have to provide offsets if there is a 2d matrix, or no offset if both matrices "
            "are 3d"))
        torch._check(bias is None, lambda: "Bias not supported yet")
        dtype = out_dtype or mat_a.dtype
        torch._check(dtype == mat_a.dtype,
                     lambda: "Grouped gemm output dtype must match `mat_a` dtype")
        return _output(mat_a, mat_b, offs, dtype)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_grouped_mm", grouped_mm, "Meta")
    patcher.defer(lib._destroy)
