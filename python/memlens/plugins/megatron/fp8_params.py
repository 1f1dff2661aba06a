"""`--fp8-param-gather` (TransformerConfig.fp8_param) where Transformer Engine is not installed:
the GEMM weights are FP8 parameters, as TE's `fp8_model_init` makes them (Float8Tensor), and
Megatron's DDP and distributed optimizer treat them as it treats TE's:

- DDP puts them in a buffer of their own, one byte per value (`param_dtype` uint8), which the
  distributed optimizer all-gathers in FP8; their gradients are in the gradient dtype;
- the optimizer's fp32 main parameters come from the high-precision initial values TE keeps
  on the host (`get_high_precision_init_val`): a shard of 4 bytes per value, as for bf16;
- after the step the main parameters are cast into the FP8 buffer in place (TE's
  `quantize_param_shard`: nothing allocated);
- the column-wise copy backward's data gradient needs (the transpose on Hopper) is the
  module's, made at its first forward (fp8_linear.py; per expert for TE's grouped experts,
  grouped_fp8.py, whose `weight{i}` are FP8 parameters too).

The stand-in parameter is a tensor of dtype float8_e4m3fn once DDP's buffer holds it (one
byte, as TE's `_data`); it answers `type()` with its nominal bf16 type, as a Float8Tensor
does, since Megatron's optimizer chooses the mixed-precision path by it. Delayed and
tensorwise scaling (Float8Tensor) only: TE's MXFP8 and blockwise parameters hold both usages
in other layouts, not modelled here.
"""

from __future__ import annotations

import contextlib
import functools
from types import ModuleType

from ...errors import MemlensError

_MARK = "_memlens_fp8_param"


def is_fp8_param(t) -> bool:
    return bool(getattr(t, _MARK, False))


@contextlib.contextmanager
def fp8_model_init(plugin, recipe):
    """The GEMM weights registered inside are FP8 parameters."""
    import torch
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    if recipe.name not in ("delayed", "tensorwise"):
        raise MemlensError(f"--fp8-param-gather with --fp8-recipe {recipe.name}: memlens' "
                           "Transformer Engine stand-in models FP8 parameters of delayed and "
                           "tensorwise scaling only (python/memlens/plugins/"
                           "megatron/fp8_params.py)")
    reason = recipe.unsupported()
    if reason:
        raise RuntimeError(reason)

    def registered(module, name, param):
        if param is None:
            return None
        grouped = plugin.grouped_linear_classes or ()  # TE's grouped experts' stand-ins
        if name == "weight" and isinstance(module, (ColumnParallelLinear, RowParallelLinear)) \
                or name.startswith("weight") and name[6:].isdigit() and isinstance(module, grouped):
            _mark(param)
        return None

    handle = torch.nn.modules.module.register_module_parameter_registration_hook(registered)
    plugin.note("--fp8-param-gather: GEMM weights are FP8 parameters (one byte per value in "
                "DDP's buffer, all-gathered in FP8), fp32 main parameters in the optimizer, "
                "as with Transformer Engine's fp8_model_init (plugins/megatron/fp8_params.py)")
    try:
        yield
    finally:
        handle.remove()


def _mark(param) -> None:
    import torch

    setattr(param, _MARK, True)
    shape = tuple(param.shape)
    # Megatron's distributed optimizer asks these of a TE Float8Tensor parameter.
    param.type = functools.partial(_nominal_type, param)
    param.get_high_precision_init_val = lambda: torch.empty(shape, dtype=torch.bfloat16)
    param.clear_high_precision_init_val = lambda: None


def _nominal_type(param, *args, **kwargs):
    import torch

    if args or kwargs:
        return torch.Tensor.type(param, *args, **kwargs)
    return "torch.cuda.BFloat16Tensor"


def fp8_utils(plugin, mod: ModuleType) -> None:
    if getattr(mod, "HAVE_TE", True):
        return
    import torch

    original = mod.is_float8tensor

    @functools.wraps(original)
    def is_float8tensor(tensor) -> bool:
        return is_fp8_param(tensor) or original(tensor)

    def modify_underlying_storage(tensor, new_raw_data) -> None:
        """DDP's uint8 buffer holds the parameter's bytes from now on: FP8 weights."""
        tensor.data = new_raw_data.view(torch.float8_e4m3fn)
        plugin.tracer.classifier.mark_fp8(new_raw_data)

    def quantize_param_shard(model_params, main_params, *args, **kwargs) -> None:
        """TE casts each fp32 main shard into its slice of the FP8 buffer, in place (values a
        trace does not have: nothing to do)."""

    def dequantize_fp8_tensor(t):
        return torch.empty(t.shape, dtype=torch.bfloat16, device=t.device)

    plugin.replace(mod, "is_float8tensor", is_float8tensor)
    plugin.replace(mod, "modify_underlying_storage", modify_underlying_storage)
    plugin.replace(mod, "quantize_param_shard", quantize_param_shard)
    plugin.replace(mod, "dequantize_fp8_tensor", dequantize_fp8_tensor)


PATCHES = {
    "megatron.core.fp8_utils": fp8_utils,
}
