"""Which kernel `F.scaled_dot_product_attention` runs on a CUDA GPU, and calling it.

A CPU-only build (and a CUDA build without a GPU) always decomposes SDPA into the math path,
which materialises the s x s scores. On a GPU, PyTorch picks a fused kernel by the rules of
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (`select_sdp_backend`): the first backend
in priority order that is enabled (the `sdpa_kernel` context) and whose constraints hold for the
GPU's compute capability, the dtypes, head dimensions, mask, dropout and GQA. We apply those
rules for the simulated GPU and call the chosen aten op, whose autograd formula then gives the
backward allocations of that kernel.
"""

from __future__ import annotations

import os

import torch

MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3  # torch._C._SDPBackend values
NAMES = {MATH: "math", FLASH: "flash", EFFICIENT: "efficient", CUDNN: "cudnn"}
_TORCH_DEFAULT_ORDER = [FLASH, EFFICIENT, MATH, CUDNN]
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def priority_order(cc: tuple[int, int]) -> list[int]:
    """PyTorch's order, with cuDNN first on Hopper and Blackwell (`check_prefer_cudnn_attention`:
    CUDA 13 builds ship cuDNN > 9.15, and PyTorch prefers it there unless
    TORCH_CUDNN_SDPA_DEPRIORITIZED=1). A priority set with sdpa_kernel(..., set_priority=True)
    is kept."""
    order = [b for b in torch._C._get_sdp_priority_order() if b in NAMES]
    if order == _TORCH_DEFAULT_ORDER and cc[0] in (9, 10) and \
            os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "0") not in ("1", "true", "TRUE"):
        return [CUDNN, FLASH, EFFICIENT, MATH]
    return order


def _enabled(backend: int) -> bool:
    c = torch._C
    return {MATH: c._get_math_sdp_enabled, FLASH: c._get_flash_sdp_enabled,
            EFFICIENT: c._get_mem_efficient_sdp_enabled, CUDNN: c._get_cudnn_sdp_enabled}[backend]()


def _heads_ok(q, k, v, enable_gqa: bool, gqa_supported: bool) -> bool:
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    if q.shape[1] == k.shape[1] == v.shape[1]:
        return True
    return enable_gqa and gqa_supported and k.shape[1] == v.shape[1] and q.shape[1] % k.shape[1] == 0


def _flash_ok(q, k, v, mask, is_causal, enable_gqa, cc) -> bool:
    d = q.shape[-1]
    return (mask is None and q.dtype in _LOW_PRECISION and (8, 0) <= cc <= (12, 1)
            and d == k.shape[-1] == v.shape[-1] and d <= 256
            and not (is_causal and q.shape[2] != k.shape[2])
            and not (q.requires_grad and d > 192 and cc in ((8, 6), (8, 9)))
            and _heads_ok(q, k, v, enable_gqa, gqa_supported=True))


def _efficient_ok(q, k, v, enable_gqa, cc) -> bool:
    half = q.dtype in _LOW_PRECISION
    if q.dtype not in (torch.float32, *_LOW_PRECISION) or (q.dtype == torch.bfloat16 and cc < (8, 0)):
        return False
    align = 8 if half and cc >= (8, 0) else 4  # minimum_gemm_alignment
    return (q.shape[-1] == k.shape[-1] and q.shape[-1] % align == 0 and v.shape[-1] % align == 0
            and cc >= (5, 0) and _heads_ok(q, k, v, enable_gqa, gqa_supported=False))


def _cudnn_ok(q, k, v, mask, enable_gqa, cc) -> bool:
    d = q.shape[-1]
    # cuDNN's attention has no gradient for its bias (derivatives.yaml: attn_bias is not
    # differentiable), so a learned bias (T5's relative position bias) never runs on it.
    learned_bias = mask is not None and mask.requires_grad and torch.is_grad_enabled()
    return (q.dtype in _LOW_PRECISION and cc >= (8, 0) and d == k.shape[-1] == v.shape[-1]
            and d % 8 == 0 and d <= 128 and not learned_bias
            and _heads_ok(q, k, v, enable_gqa, gqa_supported=False))


def select_backend(q, k, v, mask, dropout_p, is_causal, enable_gqa, cc) -> int:
    """The backend PyTorch would run for these inputs on a GPU of compute capability `cc`."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.shape[2] == 0 or k.shape[2] == 0:
        return MATH
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        return MATH
    checks = {FLASH: lambda: _flash_ok(q, k, v, mask, is_causal, enable_gqa, cc),
              EFFICIENT: lambda: _efficient_ok(q, k, v, enable_gqa, cc),
              CUDNN: lambda: _cudnn_ok(q, k, v, mask, enable_gqa, cc),
              MATH: lambda: True}
    for backend in priority_order(cc):
        if _enabled(backend) and checks[backend]():
            return backend
    raise RuntimeError("No available kernel. Aborting execution. (memlens: no SDPA backend "
                       "enabled in sdpa_kernel() accepts these inputs on the simulated GPU)")


def _as_bias(mask, q, k):
    """The additive bias the efficient and cuDNN kernels take (a bool mask becomes -inf where
    False), broadcast to (batch, heads, q, k)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros_like(mask, dtype=q.dtype).masked_fill_(~mask, float("-inf"))
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def run(backend: int, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, math):
    """Call the chosen kernel; `math` is the original F.scaled_dot_product_attention."""
    if backend == FLASH:
        return torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    need_lse = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if backend == EFFICIENT:
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, _as_bias(mask, q, k), need_lse, dropout_p, is_causal, scale=scale)[0]
    if backend == CUDNN:
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, _as_bias(mask, q, k), need_lse, dropout_p, is_causal, False, scale=scale)[0]
    return math(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=enable_gqa)
