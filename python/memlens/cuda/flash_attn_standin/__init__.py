"""A stand-in for the `flash-attn` package (FlashAttention-2), importable as `flash_attn` while
a CUDA target is traced on a machine where the real package is not installed (it needs a CUDA
toolkit to build; see ../flash_attn_package.py).

Its functions run PyTorch's own FlashAttention-2 kernels (`aten::_flash_attention_forward` and
its backward: the same mha_fwd / mha_varlen_fwd / mha_bwd / mha_varlen_bwd code, vendored in
PyTorch), so on fake tensors they allocate what flash-attn's kernels allocate: the output, the
fp32 log-sum-exp, and in backward dq/dk/dv with FlashAttention-2's own buffers
(kernels/cuda.py). Nothing else of flash-attn (its fused layers, rotary and layer-norm kernels)
is provided: importing it fails as on a machine without the package.
"""

__version__ = "2.8.3"

from .flash_attn_interface import (  # noqa: E402  (the version first, as flash-attn has it)
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]
