"""FP8 in the stand-in for Transformer Engine's GroupedLinear (grouped_linear.py): what TE 2.10's
`_GroupedLinear` holds under an FP8 recipe (fp8.py), and TE's Fp8Padding / Fp8Unpadding, which
Megatron's TEGroupedMLP puts around its experts whenever `--fp8-format` is set.

- the module's scaling state: delayed scaling's scales and amax histories, 3 forward and 2
  backward quantizers per GEMM (`init_fp8_metadata(num_gemms=N)`);
- each expert's weight quantized into the module's workspace (`weight{i}`) at its first FP8
  forward, row-wise and, where the input needs a gradient, column-wise; kept from then on (made
  again at every forward, and saved for backward, with `--disable-parameter-transpose-cache`);
  an FP8 parameter (`--fp8-param-gather`, fp8_params.py) is its own row-wise data: only its
  transpose (Hopper) and scale;
- the input quantized per expert by `split_quantize`: Float8 tensors (delayed, tensorwise) one
  by one; block-scaled ones (blockwise, mxfp8) in one buffer per usage, each expert's data
  256-byte aligned and then its scales 16-byte aligned (TE's `bulk_allocate_fp8_blockwise_
  tensors`; MXFP8 is taken to bulk-allocate the same way). The forward GEMM reads the row-wise
  data; backward keeps the column-wise;
- `save_original_input` (Megatron sets it on fc2 when `moe_act` is recomputed under FP8): the
  input quantized row-wise only and the bf16 input saved instead, quantized again in backward
  (both usages for Float8, column-wise for block scaling); TE refuses it with delayed scaling;
- backward: the output gradient quantized per expert both ways.
"""

from __future__ import annotations

import functools
import math

from .fp8 import Recipe, round_up
from .fp8_linear import keep, module_state, quantized, weight_workspace

FLOAT8 = ("delayed", "tensorwise")  # Float8Tensor: allocated one by one


def split_quantize(recipe: Recipe, m_splits, k: int, rowwise: bool, columnwise: bool,
                   device) -> list[dict]:
    """TE's `tex.split_quantize` of a [sum(m_splits), k] tensor: per expert the parts of its
    quantized rows, or for block scaling one dict of the two bulk buffers (`rowwise_data`,
    `columnwise_data`) that every expert's parts are views of."""
    import torch

    if recipe.name in FLOAT8:
        return [quantized(recipe, (m, k), False, rowwise, columnwise, device) for m in m_splits]
    buffers = {}
    for usage, wanted in (("rowwise", rowwise), ("columnwise", columnwise)):
        if not wanted:
            continue
        parts = [recipe.parts((m, k), False, usage == "rowwise", usage == "columnwise")
                 for m in m_splits]
        size = 0
        for alignment, name in ((256, f"{usage}_data"), (16, f"{usage}_scale_inv")):
            for p in parts:
                shape, dtype = p[name]
                size = round_up(size, alignment) + \
                    math.prod(shape) * getattr(torch, dtype).itemsize
        buffers[f"{usage}_data"] = torch.empty(size, dtype=torch.uint8, device=device)
    return [buffers]


def tensors(quantized_list: list[dict]) -> list:
    return [t for q in quantized_list for t in q.values()]


def forward_operands(layer, recipe: Recipe, x, m_splits, weights, grad_enabled: bool):
    """(what the forward GEMM reads, what backward keeps of the input, the quantized weights
    to save): the module's state and weight workspaces made where not yet."""
    module_state(layer.plugin, layer, recipe, layer.num_gemms)
    original = layer.save_original_input
    if original and recipe.name == "delayed":  # TE's own check
        raise ValueError("DelayedScaling recipe is not supported with save_original_input")
    need_wgrad = weights[0].requires_grad
    operands = split_quantize(recipe, m_splits, layer.in_features, True,
                              grad_enabled and need_wgrad and not original, x.device)
    weights_q = _weight_workspaces(layer, recipe, weights, grad_enabled and x.requires_grad)
    if not (grad_enabled and need_wgrad):
        saved = []
    elif original:
        saved = [x]
    else:  # update_usage(rowwise_usage=False, columnwise_usage=True)
        saved = tensors([recipe.columnwise_only(q) for q in operands])
    fresh = tensors(weights_q) if layer.config.disable_parameter_transpose_cache else []
    return operands, saved, fresh


def _weight_workspaces(layer, recipe: Recipe, weights, columnwise: bool) -> list[dict]:
    """TE's `get_weight_workspace` per expert: cached as `weight{i}` from the first
    micro-batch, unless Megatron disables the cache."""
    cached = getattr(layer, "_memlens_fp8_weights", None)
    if cached is not None:
        return cached
    made = [weight_workspace(recipe, w, columnwise, w.device) for w in weights]
    if not layer.config.disable_parameter_transpose_cache:
        for q in made:
            keep(layer.plugin, layer, q)
        layer._memlens_fp8_weights = made
    return made


def backward_operands(layer, recipe: Recipe, m_splits, grad, need_wgrad: bool):
    """What the data- and weight-gradient GEMMs read besides the saved tensors: the output
    gradient quantized both ways, and the input quantized again if the original was saved."""
    grad_q = split_quantize(recipe, m_splits, grad.shape[-1], True, True, grad.device)
    inputs_q = []
    if need_wgrad and layer.save_original_input:
        inputs_q = split_quantize(recipe, m_splits, layer.in_features, recipe.name in FLOAT8,
                                  True, grad.device)
    return grad_q, inputs_q


# -- TE's Fp8Padding / Fp8Unpadding ------------------------------------------------------------

def padding_classes(plugin) -> tuple[type, type]:
    """(Fp8Padding, Fp8Unpadding) as TE 2.10's: each expert's rows padded to a multiple of
    the alignment (16, or 32 under MXFP8) into a new tensor, or the input itself where every
    count already is one."""
    import torch

    function = _row_padding()

    class _Padding(torch.nn.Module):
        unpad = False

        def __init__(self, num_gemms: int, align_size: int | None = None) -> None:
            super().__init__()
            self.num_gemms, self.align_size = num_gemms, align_size

        def forward(self, inp, m_splits):
            if self.align_size is None:
                recipe = plugin.fp8_recipe
                self.align_size = 32 if recipe is not None and recipe.name == "mxfp8" else 16
            m_splits = list(m_splits)
            padded = [round_up(m, self.align_size) for m in m_splits]
            if padded == m_splits:
                return inp if self.unpad else (inp, m_splits)
            rows = (padded, m_splits) if self.unpad else (m_splits, padded)
            out = function.apply(inp, rows) if torch.is_grad_enabled() else \
                function.forward(None, inp, rows)
            return out if self.unpad else (out, padded)

    doc = "{}, standing in for Transformer Engine's (memlens/plugins/megatron/grouped_fp8.py)"
    return tuple(type(name, (_Padding,), {"unpad": unpad, "__doc__": doc.format(name)})
                 for name, unpad in (("Fp8Padding", False), ("Fp8Unpadding", True)))


@functools.cache
def _row_padding():
    import torch

    class RowPadding(torch.autograd.Function):
        """TE's `_Fp8Padding` / `_Fp8Unpadding`: a new tensor of the other row counts, each
        way."""

        @staticmethod
        def forward(ctx, inp, rows):
            source, target = rows
            if ctx is not None:
                ctx.source, ctx.requires_dgrad = source, inp.requires_grad
            return torch.empty((sum(target), inp.shape[-1]), dtype=inp.dtype, device=inp.device)

        @staticmethod
        def backward(ctx, grad_output):
            if not ctx.requires_dgrad:
                return None, None
            grad_output = grad_output.contiguous()
            return torch.empty((sum(ctx.source), grad_output.shape[-1]), dtype=grad_output.dtype,
                               device=grad_output.device), None

    return RowPadding
