"""Megatron's linear layers under `--fp8-format` where Transformer Engine is not installed: each
GEMM inside Megatron's FP8 context holds what TE's `_Linear` holds (module/linear.py), with the
recipe's quantized tensors (fp8.py):

- the FP8 weight: quantized at the first micro-batch into the module's workspace
  (`_fp8_workspaces["weight"]`, row-wise for forward, column-wise for backward's data
  gradient) and kept from then on; with `--fp8-param-gather` the parameter itself is FP8
  (fp8_params.py) and only its column-wise copy is the module's;
- the module's scaling state (delayed scaling: scales and amax histories);
- the input quantized row- and column-wise; the forward GEMM reads the row-wise data, which is
  then dropped: backward keeps the column-wise copy (and its scales), not a bf16 input;
- backward: the output gradient quantized both ways (data and weight gradients), the input
  gradient in bf16, the weight gradient into `main_grad` with gradient accumulation fusion
  (otherwise a new tensor), as Megatron's own function returns them.

Sequence parallelism: the input is quantized before the all-gather (row-wise only for
Float8Tensor, which cannot gather column-wise data), and backward gathers the saved local copy
again. Values are not computed: a trace has none.
"""

from __future__ import annotations

import contextlib
import functools
from importlib.util import find_spec
from types import ModuleType

from ... import categories as C
from ...errors import MemlensError
from .fp8 import RECIPES, Recipe
from .te_wgrad import fused_wgrad
from .userbuffers import overlapped


def recipe_of(plugin, config) -> Recipe:
    name = getattr(config.fp8_recipe, "value", config.fp8_recipe)
    if name not in RECIPES:
        raise MemlensError(f"--fp8-recipe {name}: memlens' Transformer Engine stand-in models "
                           "delayed, tensorwise, mxfp8 and blockwise only "
                           "(python/memlens/plugins/megatron/fp8.py)")
    device = plugin.tracer.device
    return Recipe(name, (device.major, device.minor), int(config.fp8_amax_history_len or 1))


def fp8_utils(plugin, mod: ModuleType) -> None:
    """Megatron's FP8 context without TE is a null context: the stand-in's instead, which
    refuses what TE refuses on the target and marks the GEMMs inside as FP8."""
    if getattr(mod, "HAVE_TE", True):
        return
    original = mod.get_fp8_context

    @functools.wraps(original)
    def get_fp8_context(config, layer_no: int = -1, is_init: bool = False):
        wanted = config.fp8 if not is_init else config.fp8_param
        if not wanted or mod.is_first_last_bf16_layer(config, layer_no):
            return contextlib.nullcontext()
        recipe = recipe_of(plugin, config)
        if is_init:
            from .fp8_params import fp8_model_init

            return fp8_model_init(plugin, recipe)
        return fp8_autocast(plugin, recipe)

    plugin.replace(mod, "get_fp8_context", get_fp8_context)


@contextlib.contextmanager
def fp8_autocast(plugin, recipe: Recipe | None):
    """Megatron's FP8 context with `recipe`; with None, FP8 off inside (TE's
    `fp8_autocast(enabled=False)`)."""
    reason = recipe.unsupported() if recipe is not None else None
    if reason:  # TE's fp8_autocast -> check_recipe_support
        raise RuntimeError(reason)
    previous, plugin.fp8_recipe = plugin.fp8_recipe, recipe
    if recipe is not None:
        plugin.note(f"Transformer Engine is not installed here: FP8 GEMMs ({recipe.name} "
                    "scaling) hold what TE's linear holds: a quantized weight kept across "
                    "micro-batches, the input saved quantized (column-wise) instead of in bf16, "
                    "the scaling state (plugins/megatron/fp8_linear.py)")
    try:
        yield
    finally:
        plugin.fp8_recipe = previous


def tp_layers(plugin, mod: ModuleType) -> None:
    # Whether TE is installed, not the module's HAVE_TE: te_wgrad.megatron_linears sets that.
    if find_spec("transformer_engine") is not None or not hasattr(mod, "ColumnParallelLinear"):
        return
    for cls in (mod.ColumnParallelLinear, mod.RowParallelLinear):
        original = cls._forward_impl

        @functools.wraps(original)
        def _forward_impl(self, input, weight, *args, __original=original, **kwargs):
            recipe = plugin.fp8_recipe
            if recipe is None or not weight.requires_grad or args:
                return __original(self, input, weight, *args, **kwargs)
            return _function().apply(input, weight, kwargs.get("bias"),
                                     _Layer(plugin, self, recipe, kwargs))

        plugin.patcher.setattr(cls, "_forward_impl", _forward_impl)


def quantized(recipe: Recipe, shape, weight: bool, rowwise: bool, columnwise: bool,
              device="cuda") -> dict:
    """One tensor of `shape` quantized with these usages: its parts (fp8.py), empty."""
    import torch

    return {name: torch.empty(s, dtype=getattr(torch, d), device=device)
            for name, (s, d) in recipe.parts(tuple(shape), weight, rowwise, columnwise).items()}


def weight_workspace(recipe: Recipe, weight, columnwise: bool, device="cuda") -> dict:
    """TE's quantized copy of a GEMM weight, row-wise and, where asked, column-wise; for an FP8
    parameter (`--fp8-param-gather`, fp8_params.py) only what it lacks: its own bytes are the
    row-wise data, so its column-wise copy where the GEMM needs a transpose (Hopper), and the
    scale."""
    from .fp8_params import is_fp8_param

    if not is_fp8_param(weight):
        return quantized(recipe, weight.shape, True, True, columnwise, device)
    made = quantized(recipe, weight.shape, True, False, columnwise, device)
    if recipe.name in ("delayed", "tensorwise") and recipe.non_tn:
        made = {"scale_inv": made["scale_inv"]}  # the column-wise data is the parameter's
    return made


def keep(plugin, module, tensors: dict) -> None:
    """Module state: FP8 weights and scales, parameters of `module` in the "fp8
    weights/scales" subcategory."""
    tracer = plugin.tracer
    owner = tracer.modules.index_of(module)
    for t in tensors.values():
        tracer.classifier.mark_fp8(t, owner)
        tracer.classifier.pin(t, C.PARAMETER, owner)


def module_state(plugin, module, recipe: Recipe, gemms: int = 1) -> None:
    """The module's fp8_meta (delayed scaling: its quantizers' scales and amax histories),
    made at its first FP8 forward."""
    import torch

    if getattr(module, "_memlens_fp8_meta", None) is None:
        meta = {name: torch.zeros(s, dtype=getattr(torch, d), device="cuda")
                for name, (s, d) in recipe.module_state(gemms).items()}
        keep(plugin, module, meta)
        module._memlens_fp8_meta = meta


class _Layer:
    """What the autograd function needs besides tensors: the module, its recipe, Megatron's
    flags for this call."""

    def __init__(self, plugin, module, recipe: Recipe, kwargs: dict) -> None:
        from megatron.core.utils import get_tensor_model_parallel_group_if_none

        self.plugin, self.module, self.recipe = plugin, module, recipe
        self.fusion = kwargs.get("gradient_accumulation_fusion", False)
        self.allreduce_dgrad = kwargs.get("allreduce_dgrad", False)
        self.sequence_parallel = kwargs.get("sequence_parallel", False)
        self.tp_group = get_tensor_model_parallel_group_if_none(kwargs.get("tp_group"))
        # TE gathers this layer's input into its Userbuffers (--tp-comm-overlap), outside
        # PyTorch's allocator, and writes the data gradient there (userbuffers.py)
        self.gathers_into_userbuffers = self.sequence_parallel and \
            overlapped(plugin, module, False)

    def outside_allocator(self):
        """What TE writes into its Userbuffers instead of new tensors: not booked."""
        return self.plugin.tracer.accountant.unbooked() if self.gathers_into_userbuffers else \
            contextlib.nullcontext()

    def quantize(self, shape, weight: bool, rowwise: bool, columnwise: bool) -> dict:
        return quantized(self.recipe, shape, weight, rowwise, columnwise)

    def keep(self, tensors: dict) -> None:
        keep(self.plugin, self.module, tensors)

    def state(self) -> None:
        module_state(self.plugin, self.module, self.recipe)

    def weight(self, weight) -> dict:
        """The quantized weight: the cached workspace, made once (TE's `_fp8_workspaces`,
        refreshed in place at each first micro-batch); for an FP8 parameter, its column-wise
        copy (the parameter's own bytes are the row-wise data)."""
        cached = getattr(self.module, "_memlens_fp8_weight", None)
        if cached is None:
            cached = weight_workspace(self.recipe, weight, True)
            self.keep(cached)
            self.module._memlens_fp8_weight = cached
        return cached


@functools.cache
def _function():
    import torch
    import torch.distributed as dist

    class Fp8Linear(torch.autograd.Function):
        """memlens' stand-in for Transformer Engine's FP8 `_Linear` (its memory)."""

        @staticmethod
        def forward(ctx, input, weight, bias, layer: _Layer):
            recipe = layer.recipe
            layer.state()
            layer.weight(weight)
            shape = input.shape
            if layer.sequence_parallel:
                float8 = recipe.name in ("delayed", "tensorwise")
                local = layer.quantize(shape, False, True, not float8)
                world = layer.tp_group.size()
                total_shape = (shape[0] * world, *shape[1:])
                with layer.outside_allocator():
                    gathered = layer.quantize(total_shape, False, True, False)
                    dist.all_gather_into_tensor(next(iter(gathered.values())),
                                                next(iter(local.values())), group=layer.tp_group)
                saved = local if float8 else recipe.columnwise_only(local)
            else:
                local = layer.quantize(shape, False, True, True)
                gathered, total_shape = local, shape
                saved = recipe.columnwise_only(local)
            out_features = weight.shape[0]
            output = torch.empty((*total_shape[:-1], out_features), dtype=input.dtype,
                                 device=input.device)  # the bias is added by the GEMM
            layer.plugin.te_gemm(output.device, layer.module)  # TE's workspace, at its first GEMM
            del gathered, local  # the row-wise data and any gathered copy go after the GEMM
            names = sorted(saved)
            ctx.names, ctx.layer, ctx.shape = names, layer, tuple(shape)
            ctx.total_shape, ctx.weight_shape = tuple(total_shape), tuple(weight.shape)
            ctx.weight, ctx.use_bias, ctx.input_dtype = weight, bias is not None, input.dtype
            ctx.main_grad = weight.main_grad if layer.fusion and hasattr(weight, "main_grad") \
                else None
            ctx.save_for_backward(*(saved[n] for n in names))
            return output

        @staticmethod
        def backward(ctx, grad_output):
            layer, weight = ctx.layer, ctx.weight
            saved = dict(zip(ctx.names, ctx.saved_tensors))
            # Output gradient both ways: row-wise for the data gradient, column-wise for the
            # weight gradient (with its bias gradient, fused into the cast).
            grad_q = layer.quantize(grad_output.shape, False, True, True)
            grad_bias = torch.empty(grad_output.shape[-1], dtype=grad_output.dtype,
                                    device=grad_output.device) if ctx.use_bias else None
            with layer.outside_allocator():
                grad_input = torch.empty(ctx.total_shape, dtype=ctx.input_dtype,
                                         device=grad_output.device)
            layer.plugin.te_gemm(grad_output.device, layer.module)
            gathered = None
            if layer.sequence_parallel:  # the saved local input, gathered again for wgrad
                with layer.outside_allocator():
                    gathered = layer.quantize(ctx.total_shape, False, True, False)
                    dist.all_gather_into_tensor(next(iter(gathered.values())),
                                                next(iter(saved.values())), group=layer.tp_group)
                sub = torch.empty(ctx.shape, dtype=ctx.input_dtype, device=grad_output.device)
                with layer.outside_allocator():
                    dist.reduce_scatter_tensor(sub, grad_input, group=layer.tp_group)
                grad_input = sub
            elif layer.allreduce_dgrad:
                dist.all_reduce(grad_input, group=layer.tp_group)
            layer.plugin.te_gemm(grad_output.device, layer.module, weight_gradient=True)
            grad_weight = _weight_gradient(ctx, weight, grad_output)
            del grad_q, gathered, saved
            return grad_input, grad_weight, grad_bias, None

    return Fp8Linear


def _weight_gradient(ctx, weight, grad_output):
    """As TE's linear returns it: accumulated into `main_grad` by the fused GEMM, with TE's
    cached dummy gradient for DDP's hooks (te_wgrad.py), or a new tensor. In the weight's
    dtype: an FP8 parameter's gradient is not cast again."""
    import torch

    dtype = weight.dtype
    if not ctx.layer.fusion:
        return torch.empty(ctx.weight_shape, dtype=dtype, device=grad_output.device)
    weight.main_grad = ctx.main_grad
    return fused_wgrad(ctx.layer.plugin, weight, grad_output.device)


PATCHES = {
    "megatron.core.fp8_utils": fp8_utils,
    "megatron.core.tensor_parallel.layers": tp_layers,
}

