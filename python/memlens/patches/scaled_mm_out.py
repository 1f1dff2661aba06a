"""`aten::_scaled_mm.out` (FP8 GEMMs in a compiled graph) on fake tensors.

Inductor emits every `torch._scaled_mm` of a compiled FP8 model (torchao's float8 training
under `torch.compile`, Lightning's FP8 examples) as `extern_kernels._scaled_mm(..., out=buf)`.
torch 2.13 has a Meta kernel for the functional overload only, so FakeTensorMode ran the `.out`
overload's real kernel, which asked the simulated GPU for a real tensor. While a CUDA target is
traced, the `.out` overload gets a Meta kernel: torch's own checks and shape for the functional
one, then `out` resized to that shape, as the CUDA kernel does. Registered only where torch has
none.
"""

from __future__ import annotations

import torch

from .patcher import Patcher

_NAME = "aten::_scaled_mm.out"


def apply(patcher: Patcher) -> None:
    if torch._C._dispatch_has_kernel_for_dispatch_key(_NAME, "Meta"):
        return
    from torch._meta_registrations import meta_scaled_mm

    def scaled_mm_out(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
                      out_dtype=None, use_fast_accum=False, *, out):
        result = meta_scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                                use_fast_accum)
        torch._check(out.dtype == result.dtype, lambda: (
            f"_scaled_mm: out has dtype {out.dtype}, the result is {result.dtype}"))
        if out.shape != result.shape:
            out.resize_(result.shape)
        return out

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_mm.out", scaled_mm_out, "Meta")
    patcher.defer(lib._destroy)
