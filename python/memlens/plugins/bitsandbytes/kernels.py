"""What bitsandbytes' CUDA kernels allocate inside an operator, beyond its outputs.

`bitsandbytes::gemm_4bit` (the forward of a 4-bit layer, MatMul4Bit.forward) is, on CUDA
(backends/cuda/ops.py), either bitsandbytes' fused kernel (nothing of its own) or, where its
per-architecture heuristic `_gemm_4bit_use_custom_fn(device, dtype, M, N, K)` prefers it (most
training shapes: M, the tokens, is large), `_dequant_linear_fallback`:
  with double quantization, the 8-bit absmax dequantized to fp32 (`absmax_dq`, n/blocksize
  floats) and `absmax_dq + offset` (as many), the first freed when the second exists;
  the weight dequantized to A's dtype (`B_dq`, N x K), then `F.linear`'s output.
The fake implementation (bitsandbytes/_ops.py) allocates only the output; this rule adds the
fallback's buffers, asking bitsandbytes' own heuristic on the simulated GPU's properties.
"""

from __future__ import annotations

from math import prod

from ...kernels.plan import Plan


def gemm_4bit_rule(cuda_ops):
    def rule(args: tuple, kwargs: dict, out):
        names = ("A", "B", "shapeB", "absmax", "blocksize", "quant_type", "bias",
                 "absmax_8bit", "absmax_code", "absmax_offset")
        given = dict(zip(names, args))
        given.update(kwargs)
        A, shape, blocksize = given["A"], list(given["shapeB"]), given["blocksize"]
        K = A.shape[-1]
        M, N = A.numel() // K, shape[0]
        if M <= cuda_ops._gemm_4bit_custom_max_m and K % blocksize == 0 and \
                cuda_ops._gemm_4bit_use_custom_fn(A.device.index or 0, A.dtype, M, N, K):
            return None  # the fused kernel
        plan = Plan()
        nested = given.get("absmax_8bit")
        if nested is not None:
            absmax_dq = plan.alloc(nested.numel() * 4)
            absmax = plan.alloc(nested.numel() * 4)
            plan.free(absmax_dq)
        weight = plan.alloc(prod(shape) * A.element_size())
        plan.outputs(0)
        return plan

    return rule
