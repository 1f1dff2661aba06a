"""FP8 as Transformer Engine holds it in memory, for Megatron's `--fp8-format` where TE is not
installed: what each recipe's quantized tensors are made of, and the state a TE linear module
keeps. Read from Transformer Engine 2.20 (`pytorch/quantization.py`, `tensor/float8_tensor.py`,
`tensor/mxfp8_tensor.py`, `tensor/float8_blockwise_tensor.py`, `module/base.py`); the stand-in
linear that uses it is fp8_linear.py.

Megatron's recipes and TE's quantized tensors (M rows = all but the last dimension, K columns):

- `delayed` (DelayedScaling) and `tensorwise` (Float8CurrentScaling): Float8Tensor, one fp32
  scale-inverse per tensor; row-wise usage is the [M, K] bytes, column-wise usage a transposed
  [K, M] copy where the GEMM takes only the TN layout (Hopper, Ada), the same bytes elsewhere
  (Blackwell). Delayed scaling keeps, per module, a scale and an amax history of
  `--fp8-amax-history-len` rows per quantizer: 3 forward (input, weight, output) and 2 backward
  (grad output, grad input) for one GEMM.
- `mxfp8` (MXFP8BlockScaling, Blackwell only): MXFP8Tensor, each usage its own [M, K] bytes
  with one E8M0 byte per 32 values (row-wise [M→128, K/32→4], column-wise [M/32→4, K→128],
  padded up to those multiples).
- `blockwise` (Float8BlockScaling): Float8BlockwiseQTensor, fp32 scales per 128 × 128 block
  for weights and per 1 × 128 for inputs and gradients; column-wise data is stored transposed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")

# Quantizers per GEMM of a TE module (base.py set_meta_tensor): forward input, weight, output;
# backward grad output, grad input.
FORWARD_QUANTIZERS, BACKWARD_QUANTIZERS = 3, 2


def round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class Recipe:
    """A recipe on a target GPU of compute capability `capability`."""

    name: str
    capability: tuple[int, int]
    amax_history_len: int = 1

    @property
    def non_tn(self) -> bool:
        """The GEMM takes every FP8 layout (utils.is_non_tn_fp8_gemm_supported): a Float8Tensor
        needs no transposed copy."""
        c = self.capability
        return (10, 0) <= c < (12, 0) or c >= (13, 0)

    def unsupported(self) -> str | None:
        """Transformer Engine's own refusal of this recipe on the target (quantization.py
        check_recipe_support), or None. Block scaling also needs CUDA 12.9, which a trace
        assumes."""
        c = self.capability
        if self.name in ("delayed", "tensorwise") and c < (8, 9):
            return "Device compute capability 8.9 or higher required for FP8 execution."
        if self.name == "mxfp8" and c >= (12, 0):
            return "MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet."
        if self.name == "mxfp8" and c < (10, 0):
            return "Device compute capability 10.0 or higher required for MXFP8 execution."
        if self.name == "blockwise" and c < (9, 0):
            return ("FP8 block scaled GEMM requires compute capability 9.0 or higher and "
                    "CUDA >= 12.9.")
        return None

    def parts(self, shape: tuple[int, ...], weight: bool, rowwise: bool,
              columnwise: bool) -> dict[str, tuple[tuple[int, ...], str]]:
        """The tensors (name -> shape, dtype name) one quantized tensor of `shape` is made of
        with these usages: each quantizer's `inner_tensor_specs`."""
        m, k = math.prod(shape[:-1]), shape[-1]
        out: dict[str, tuple[tuple[int, ...], str]] = {}
        if self.name in ("delayed", "tensorwise"):
            if rowwise or (columnwise and self.non_tn):
                out["data"] = ((m, k), "uint8")
            if columnwise and not self.non_tn:
                out["transpose"] = ((k, m), "uint8")
            out["scale_inv"] = ((1,), "float32")
        elif self.name == "mxfp8":
            if rowwise:
                out["rowwise_data"] = ((m, k), "uint8")
                out["rowwise_scale_inv"] = ((round_up(m, 128), round_up(k // 32, 4)), "uint8")
            if columnwise:
                out["columnwise_data"] = ((m, k), "uint8")
                out["columnwise_scale_inv"] = ((round_up(m // 32, 4), round_up(k, 128)),
                                               "uint8")
        else:  # blockwise: 128 x 128 blocks for weights, 1 x 128 for the rest
            if rowwise:
                out["rowwise_data"] = ((m, k), "uint8")
                out["rowwise_scale_inv"] = (_block_scale_shape(m, k, weight, False), "float32")
            if columnwise:
                out["columnwise_data"] = ((k, m), "uint8")
                out["columnwise_scale_inv"] = (_block_scale_shape(m, k, weight, True), "float32")
        return out

    def columnwise_only(self, parts: dict) -> dict:
        """What `update_usage(rowwise_usage=False, columnwise_usage=True)` keeps: a saved input
        drops the row-wise data the forward GEMM used."""
        if self.name in ("delayed", "tensorwise"):
            keep = ("data", "scale_inv") if self.non_tn else ("transpose", "scale_inv")
        else:
            keep = ("columnwise_data", "columnwise_scale_inv")
        return {name: t for name, t in parts.items() if name in keep}

    def rowwise_only(self, parts: dict) -> dict:
        keep = ("data", "scale_inv", "rowwise_data", "rowwise_scale_inv")
        return {name: t for name, t in parts.items() if name in keep}

    def module_state(self, gemms: int = 1) -> dict[str, tuple[tuple[int, ...], str]]:
        """What a TE module of `gemms` GEMMs keeps (fp8_meta's recipe states): only delayed
        scaling has any."""
        if self.name != "delayed":
            return {}
        n, fwd, bwd = self.amax_history_len, gemms * FORWARD_QUANTIZERS, gemms * BACKWARD_QUANTIZERS
        return {"scale_fwd": ((fwd,), "float32"), "amax_history_fwd": ((n, fwd), "float32"),
                "scale_bwd": ((bwd,), "float32"), "amax_history_bwd": ((n, bwd), "float32")}


def _block_scale_shape(m: int, k: int, weight: bool, columnwise: bool) -> tuple[int, int]:
    """Float8BlockQuantizer.get_scale_shape: scales padded to multiples of 4."""
    blocks_m, blocks_k = -(-m // 128), -(-k // 128)
    if weight:  # 2D
        return (blocks_k, round_up(blocks_m, 4)) if columnwise else \
            (blocks_m, round_up(blocks_k, 4))
    return (blocks_m, round_up(k, 4)) if columnwise else (blocks_k, round_up(m, 4))

