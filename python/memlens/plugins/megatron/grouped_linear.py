"""Transformer Engine's grouped linear layers where TE is absent, so a job that asks for TE's
layers and `--moe-grouped-gemm` runs Megatron's own TEGroupedMLP, as on a GPU machine.

Megatron builds TEGroupedMLP's two layers from TE's `GroupedLinear` (its
TEColumnParallelGroupedLinear and TERowParallelGroupedLinear, `extensions/transformer_engine.py`).
Without TE those classes are None, and memlens used to run the experts as SequentialMLP: the
same weights, but each expert's activations apart, an extra copy of every output (its
`torch.cat`), and `--recompute-modules moe_act` (TEGroupedMLP's) impossible. The stand-ins here
hold what TE 2.10's `_GroupedLinear` holds (`pytorch/module/grouped_linear.py`); this module's
list is bf16/fp16/fp32, and under `--fp8-format` the quantized tensors are grouped_fp8.py's:

- parameters `weight0..N-1` (one per local expert, `[out, in]`, the expert-TP shard) and
  `bias0..N-1` where asked, in `params_dtype`, made one after another as TE makes them;
- forward: the input split by tokens per expert (views), one output `[tokens, out]` written by
  the grouped GEMM on TE's grouped-GEMM workspaces (te_gemm.take_grouped: four, kept, made at
  the first grouped GEMM); saved for backward: the input (unless the weights are frozen) and the
  weights;
- backward: the output gradient made contiguous, the input gradient `[tokens, in]`, and per
  expert a weight gradient accumulated into `main_grad` (gradient-accumulation fusion; TE's
  cached dummy gradient goes to Megatron's DDP hooks) or a new one of the activation dtype, and
  a bias gradient where there is a bias;
- with `--delay-wgrad-compute` (or `--overlap-dispatch-backward-with-experts-wgrad`), TE's
  deferred weight gradients: backward allocates the weight gradients but keeps the input and
  the output gradient (TE's WeightGradStore) until Megatron calls `backward_dw`, which makes
  the bias gradients, lets the operands go and runs the reduction hooks Megatron registered
  (`register_wgrad_accumulation_and_reduce_hooks`; the parameters are marked
  `skip_backward_post_hook`, as TE marks them).

Under FP8, Megatron's TEGroupedMLP asserts TE (`experts.HAVE_TE`) and pads each expert's
tokens with TE's Fp8Padding: where TE is absent, `experts` below gives it the stand-ins.

Written for TE 2.10 as Megatron-core 0.16 to 0.19 call it (`forward(x, m_splits)` returning
`(output, bias)`). Not covered, with an error naming it: FP4 and deferred weight gradients
under FP8.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable

from ... import categories as C
from ...errors import MemlensError
from . import grouped_fp8
from .te_wgrad import fused_wgrad

NOTE = ("Transformer Engine is not installed here: its grouped-GEMM experts (TEGroupedMLP) run "
        "Megatron's own code with memlens' stand-in for TE's GroupedLinear, holding what TE's "
        "holds (plugins/megatron/grouped_linear.py)")

DELAYED_NOTE = ("--delay-wgrad-compute: the grouped experts keep their weight-gradient operands "
                "until Megatron's backward_dw, as TE's GroupedLinear does; the layers standing in "
                "for TE's other linear modules (attention, dense and shared-expert MLPs) compute "
                "their weight gradients in backward, where TE's would defer them too")


def swap_experts(plugin, spec) -> bool:
    """The experts of a layer spec's MoE layer (SequentialMLP, or 0.16's legacy GroupedMLP, as
    Megatron's local spec, or TE's without TE, picks them) become TEGroupedMLP with the
    stand-in layers, as TE's spec builds them; True if there was one."""
    from megatron.core.transformer.moe import experts as experts_module

    from .spec_swap import swap_in_spec

    asked = {getattr(experts_module, n, None) for n in ("SequentialMLP", "GroupedMLP")} - {None}
    column, row = layer_classes(plugin)
    submodules = getattr(experts_module, "GroupedMLPSubmodules", None)  # 0.19
    if submodules is None:
        from megatron.core.transformer.mlp import MLPSubmodules as submodules

    def replacement(value: Any) -> Any:
        grouped = submodules(linear_fc1=column, linear_fc2=row)
        if isinstance(value, functools.partial) and value.func in asked:  # 0.19's partials
            return functools.partial(experts_module.TEGroupedMLP, submodules=grouped)
        if getattr(value, "module", None) in asked:  # a ModuleSpec
            return type(value)(module=experts_module.TEGroupedMLP, submodules=grouped)
        return None

    return swap_in_spec(spec, replacement)


@functools.cache
def _grouped_linear_base() -> type:
    import torch

    class GroupedLinear(torch.nn.Module):
        plugin = None  # set on each trace's subclasses (layer_classes)
        parallel_mode: str | None = None

        def __init__(self, num_gemms: int, input_size: int, output_size: int, *, config,
                     init_method: Callable, bias: bool, skip_bias_add: bool,
                     is_expert: bool = False, tp_comm_buffer_name=None, pg_collection=None,
                     name=None):
            super().__init__()
            self.plugin.note(NOTE)
            if getattr(config, "fp4", None):
                raise MemlensError(
                    "FP4 grouped GEMMs (--fp4-format) need Transformer Engine, which is not "
                    "installed here: memlens' stand-in for TE's GroupedLinear "
                    "(plugins/megatron/grouped_linear.py) covers bf16, fp16, fp32 and FP8 GEMMs")
            # Megatron's TEGroupedLinear defers the weight gradients for either flag.
            self.delay_wgrad_compute = bool(
                getattr(config, "delay_wgrad_compute", False) or
                getattr(config, "overlap_dispatch_backward_with_experts_wgrad", False))
            if self.delay_wgrad_compute and getattr(config, "fp8", None):
                raise MemlensError(
                    "--delay-wgrad-compute with --fp8-format defers the grouped experts' FP8 "
                    "weight-gradient operands (TE's WeightGradStore), and Transformer Engine is "
                    "not installed here: memlens' stand-in for TE's GroupedLinear defers them "
                    "in bf16, fp16 and fp32 only")
            if self.delay_wgrad_compute:
                self.plugin.note(DELAYED_NOTE)
            if pg_collection is None:
                from megatron.core.process_groups_config import ProcessGroupCollection

                pg_collection = ProcessGroupCollection.use_mpu_process_groups()
            tp = pg_collection.expt_tp.size()
            if self.parallel_mode == "column":
                output_size //= tp
            else:
                input_size //= tp
            self.config, self.num_gemms = config, num_gemms
            self.in_features, self.out_features = input_size, output_size
            self.use_bias, self.te_return_bias = bias, skip_bias_add and bias
            self.fuse_wgrad_accumulation = config.gradient_accumulation_fusion
            # TE's WeightGradStore: what each deferred weight-gradient GEMM will read, in order.
            self.wgrad_store: collections.deque = collections.deque()
            self.wgrad_accumulation_and_reduce_hooks: list[Callable] = []
            self.save_original_input = False  # Megatron sets it for FP8 recompute only
            self.is_first_microbatch = True
            expert_pgs = is_expert and (config.expert_model_parallel_size > 1 or
                                        config.expert_tensor_parallel_size !=
                                        config.tensor_model_parallel_size)
            device = "cpu" if config.use_cpu_initialization else torch.cuda.current_device()
            for i in range(num_gemms):  # TE registers weight0, bias0, weight1, ...
                weight = torch.nn.Parameter(torch.empty(output_size, input_size, device=device,
                                                        dtype=config.params_dtype))
                if config.perform_initialization:
                    with torch.no_grad():
                        init_method(weight)
                self.register_parameter(f"weight{i}", weight)
                if bias:
                    self.register_parameter(f"bias{i}", torch.nn.Parameter(torch.zeros(
                        output_size, device=device, dtype=config.params_dtype)))
            for name, param in self.named_parameters():  # Megatron's expert attributes
                param.allreduce = not expert_pgs
                param.tensor_model_parallel = name.startswith("weight") or \
                    self.parallel_mode == "column"
                if param.tensor_model_parallel:
                    param.partition_dim = 0 if self.parallel_mode == "column" else 1
                    param.partition_stride = 1
                if self.delay_wgrad_compute:  # its gradient is ready at backward_dw, not before
                    param.skip_backward_post_hook = True

        def forward(self, x, m_splits):
            weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
            biases = [getattr(self, f"bias{i}") for i in range(self.num_gemms)] \
                if self.use_bias else []
            if not x.is_contiguous():  # TE's prepare_forward
                x = x.contiguous()
            dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") \
                else x.dtype
            apply_bias = self.use_bias and not self.te_return_bias
            args = (x, (list(m_splits), dtype, apply_bias, self, self.plugin.fp8_recipe))
            if torch.is_grad_enabled():
                out = _function().apply(*args, *weights, *(biases if apply_bias else []))
            else:
                out = _function().forward(None, *args, *weights,
                                          *(biases if apply_bias else []))
            self.is_first_microbatch = False
            if self.te_return_bias:
                return out, [b.to(dtype) for b in biases]
            return out, None

        def need_backward_dw(self) -> bool:
            return self.delay_wgrad_compute

        def register_wgrad_accumulation_and_reduce_hooks(self, hook: Callable) -> None:
            self.wgrad_accumulation_and_reduce_hooks.append(hook)

        def _trigger_wgrad_accumulation_and_reduce_hooks(self) -> None:
            for hook in self.wgrad_accumulation_and_reduce_hooks:
                hook()

        def backward_dw(self):
            """TE's deferred weight-gradient GEMM of the oldest backward: it reads the input
            and output gradient that backward kept, writes the gradients backward allocated
            (or accumulates into `main_grad`), makes the bias gradients, then lets go of its
            operands and runs the hooks Megatron registered (gradient reduction)."""
            if not self.delay_wgrad_compute or not self.wgrad_store:
                return
            operands, wgrads = self.wgrad_store.popleft()
            weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
            if not self.fuse_wgrad_accumulation:
                for weight, wgrad in zip(weights, wgrads):
                    weight.grad = wgrad.to(weight.dtype)
                    # set here, not by autograd: no gradient hook of the tracer's sees it
                    self.plugin.tracer.classifier.mark(weight.grad, C.GRADIENT)
            if self.use_bias:
                dtype = wgrads[0].dtype if wgrads else operands[1].dtype
                for i in range(self.num_gemms):
                    bias = getattr(self, f"bias{i}")
                    grad = torch.empty(self.out_features, dtype=dtype, device=bias.device)
                    if bias.grad is None:
                        bias.grad = grad.to(bias.dtype)
                        self.plugin.tracer.classifier.mark(bias.grad, C.GRADIENT)
                    del grad
            del operands, wgrads
            self._trigger_wgrad_accumulation_and_reduce_hooks()

    return GroupedLinear


def layer_classes(plugin) -> tuple[type, type]:
    """(TEColumnParallelGroupedLinear, TERowParallelGroupedLinear) stand-ins for `plugin`'s
    trace, named as TE's: made once per trace (each layer spec asks)."""
    if plugin.grouped_linear_classes is None:
        base = _grouped_linear_base()
        doc = ("{}, standing in for Transformer Engine's (memlens/plugins/megatron/"
               "grouped_linear.py): the memory of TE's GroupedLinear")
        plugin.grouped_linear_classes = tuple(
            type(name, (base,), {"plugin": plugin, "parallel_mode": mode,
                                 "__doc__": doc.format(name)})
            for name, mode in (("TEColumnParallelGroupedLinear", "column"),
                               ("TERowParallelGroupedLinear", "row")))
    return plugin.grouped_linear_classes


@functools.cache
def _function():
    import torch

    from .te_gemm import take_grouped

    class GroupedLinearFunction(torch.autograd.Function):
        """TE 2.10's `_GroupedLinear`, as it allocates (FP8: grouped_fp8.py)."""

        @staticmethod
        def forward(ctx, x, settings, *params):
            m_splits, dtype, apply_bias, layer, recipe = settings
            n = layer.num_gemms
            weights = params[:n]
            if recipe is None:
                view = x.reshape(-1, layer.in_features)
                if view.dtype != dtype:
                    view = view.to(dtype)
                weights_cast = [w if w.dtype == dtype else w.to(dtype) for w in weights]
                operands, saved = [], [view if weights[0].requires_grad else None, *weights_cast]
            else:
                operands, saved, weights_q = grouped_fp8.forward_operands(
                    layer, recipe, x, m_splits, weights, ctx is not None)
                saved = [*saved, *weights_q]
            take_grouped(layer.plugin, x.device)
            out = torch.empty((sum(m_splits), layer.out_features), dtype=dtype, device=x.device)
            del operands  # the row-wise data the GEMM read
            if ctx is not None:
                ctx.save_for_backward(*saved)
                ctx.layer, ctx.m_splits, ctx.dtype, ctx.recipe = layer, m_splits, dtype, recipe
                ctx.weights, ctx.apply_bias, ctx.x_shape = weights, apply_bias, x.shape
                ctx.requires_dgrad = x.requires_grad
                # TE reads main_grad in backward (Megatron's DDP sets it before the step)
            return out.view(-1, *x.shape[1:-1], layer.out_features)

        @staticmethod
        def backward(ctx, grad_output):
            layer, dtype, device = ctx.layer, ctx.dtype, grad_output.device
            saved = ctx.saved_tensors  # unpacked as TE does (saved-tensor hooks see it)
            grad = grad_output.contiguous().view(-1, grad_output.shape[-1])
            need_wgrad = ctx.weights[0].requires_grad
            quantized = ()
            if ctx.recipe is not None:
                quantized = grouped_fp8.backward_operands(layer, ctx.recipe, ctx.m_splits, grad,
                                                          need_wgrad)
            elif grad.dtype != dtype:
                grad = grad.to(dtype)
            dgrad = None
            if ctx.requires_dgrad:
                dgrad = torch.empty((sum(ctx.m_splits), layer.in_features), dtype=dtype,
                                    device=device).view(ctx.x_shape)
            wgrads = [None] * layer.num_gemms
            if need_wgrad:
                wgrads = [_weight_gradient(layer, w, dtype, device) for w in ctx.weights]
            if need_wgrad and layer.delay_wgrad_compute:
                # TE keeps the weight-gradient GEMM's operands and output for backward_dw;
                # autograd gets the gradients unwritten, and no bias gradients yet.
                kept = [] if layer.fuse_wgrad_accumulation else wgrads
                layer.wgrad_store.append(((saved[0], grad), kept))
                bgrads = [None] * layer.num_gemms if ctx.apply_bias else []
            else:
                bgrads = [torch.empty(layer.out_features, dtype=dtype, device=device)
                          for _ in range(layer.num_gemms)] if ctx.apply_bias else []
            del saved, quantized
            return (dgrad, None, *wgrads, *bgrads)

    return GroupedLinearFunction


def _weight_gradient(layer, weight, dtype, device):
    """As TE's grouped GEMM returns it: accumulated into `main_grad` (with TE's cached dummy
    for Megatron's DDP hooks), or a new gradient of the activation dtype."""
    import torch

    if not layer.fuse_wgrad_accumulation:
        return torch.empty(weight.shape, dtype=dtype, device=device)
    return fused_wgrad(layer.plugin, weight, device)



def experts(plugin, mod) -> None:
    """Megatron's TEGroupedMLP under `--fp8-format` asserts TE and pads each expert's tokens
    with TE's Fp8Padding (0.16 to 0.19): where TE is absent, they are the stand-ins'."""
    if getattr(mod, "HAVE_TE", True) or not hasattr(mod, "TEGroupedMLP"):
        return  # 0.16 leaves Fp8Padding unbound without TE, 0.19 binds it to None
    padding, unpadding = grouped_fp8.padding_classes(plugin)
    plugin.patcher.setattr(mod, "HAVE_TE", True)  # read only by TEGroupedMLP's FP8 assert
    plugin.patcher.setattr(mod, "Fp8Padding", padding)
    plugin.patcher.setattr(mod, "Fp8Unpadding", unpadding)


PATCHES = {"megatron.core.transformer.moe.experts": experts}
