"""Megatron-core (and Megatron-LM's training loop): what a trace needs from them, and nothing else.

Activated when `megatron.core` is imported inside a trace (plugins/__init__.py); every patch is
applied to a module right after it is imported, version-checked, and undone when the trace
ends. What the patches change about the run is listed in the snapshot's `meta.notes`.

- Phases follow Megatron's structure: each call of a pipeline schedule (the function
  `get_forward_backward_func()` returns) is `forward_backward_iter_N`, each
  `MegatronOptimizer.step()` is `optimizer_step_iter_N` (grad copies, clipping and the
  parameter all-gather included); before the first schedule call is `setup_model_and_optimizer`.
- The CUDA RNG tracker keeps its states through `torch.cuda.get_rng_state`/`set_rng_state`
  (simulated) rather than `torch.cuda.default_generators`, and forks without comparing CPU
  generator states (values a trace does not have; the comparison only ever logs a warning).
- Categories: the DDP parameter buffer is parameter memory and the gradient buffer gradient
  memory (both held by the DDP wrapper: they are shared by all its parameters); the optimizer's
  fp32 main parameters are optimizer state, as Megatron counts them.
- MoE routing is drop-and-pad at capacity factor 1.0: every expert receives exactly its share
  of the tokens (uniform load), so shapes do not depend on router values a trace does not have.
- Megatron-LM's `megatron.training` (when present) is set up for a trace: see megatron_args.py.
- Transformer Engine or apex absent: their kernels are stood in for by ones with the same memory
  (megatron_attention.py, megatron_kernels.py, megatron_norm.py; docs/megatron.md has the list).

What the patches call lives in small helper modules (megatron_data, megatron_layout,
megatron_rng, ...); the patches themselves are all here.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType

from .. import categories as C
from ..patches.patcher import Patcher, check_tested
from .megatron_data import mock_iterator
from .megatron_kernels import fused_rope_function
from .megatron_layout import declare_layout, share_by_parameter

SCHEDULES = ("forward_backward_no_pipelining", "forward_backward_pipelining_with_interleaving",
             "forward_backward_pipelining_without_interleaving")

# (model parameters, their fp32 main copies) group lists of Megatron's mixed-precision
# optimizers: Float16OptimizerWithFloat16Params, DistributedOptimizer.
_MAIN_PARAM_GROUPS = (("float16_groups", "fp32_from_float16_groups"),
                      ("model_float16_groups", "shard_fp32_from_float16_groups"))

# Megatron-LM's entry-point scripts and their helpers, which import Megatron's functions.
_ENTRY_POINTS = ("__main__", "gpt_builders", "mamba_builders", "model_provider")

_active: "_Plugin | None" = None


def activate(tracer, watcher) -> None:
    """Called as `megatron.core` starts to be imported: nothing of it exists yet."""
    global _active
    _active = _Plugin(tracer)
    from . import megatron_kernels

    _active.kernels = megatron_kernels.install()
    for name, patch in _active.patches().items():
        watcher.watch(name, patch)


def deactivate() -> None:
    global _active
    if _active is not None:
        _active.undo()
        _active = None


class _Plugin:
    def __init__(self, tracer) -> None:
        self.tracer = tracer
        self.patcher = Patcher()
        self.kernels: list[str] = []  # stand-in CUDA extensions put in sys.modules
        # Transformer Engine was asked for but is not installed: attention as TE holds it.
        self.flash_attention = False
        self._fused_adam: type | None = None  # FusedAdam's stand-in, once Megatron asks

    def replace(self, module: ModuleType, name: str, new) -> None:
        """Replace a module-level function, also where other Megatron modules bound it with
        `from module import name` (before or after the replacement: undone everywhere)."""
        self.patcher.replace_everywhere(module, name, new, _megatron_modules)

    def undo(self) -> None:
        from . import megatron_kernels

        megatron_kernels.uninstall(self.kernels)
        self.patcher.undo()

    def note(self, text: str) -> None:
        if text not in self.tracer.notes:
            self.tracer.notes.append(text)

    def patches(self) -> dict:
        """module name -> what to patch in it once it is imported."""
        return {
            "megatron.core.package_info": self.check_version,
            "megatron.core.utils": self.utils,
            "megatron.core.parallel_state": self.parallel_state,
            "megatron.core.tensor_parallel.random": self.rng,
            "megatron.core.pipeline_parallel.schedules": self.schedules,
            "megatron.core.optimizer": self.fused_adam,
            "megatron.core.optimizer.distrib_optimizer": self.distributed_optimizer,
            "megatron.core.optimizer.optimizer": self.optimizer,
            "megatron.core.distributed.distributed_data_parallel": self.buffers,
            "megatron.core.transformer.transformer_config": self.transformer_config,
            "megatron.core.transformer.torch_norm": self.torch_norm,
            "megatron.core.tensor_parallel.layers": self.tp_layers,
            "megatron.core.transformer.moe.moe_utils": self.moe_utils,
            "megatron.core.transformer.moe.token_dispatcher": self.token_dispatcher,
            "megatron.core.models.gpt.gpt_layer_specs": self.layer_specs,
            "megatron.core.models.common.embeddings.rope_utils": self.rope_utils,
            # Megatron-LM's training package (not in the megatron-core wheel)
            "megatron.training.arguments": self.arguments,
            "megatron.training.initialize": self.initialize,
            "megatron.training.training": self.training,
            "megatron.training.utils": self.training_utils,
        }

    def check_version(self, mod: ModuleType) -> None:
        check_tested("megatron", getattr(mod, "__version__", "0"))

    # -- layout ------------------------------------------------------------------------------
    def parallel_state(self, mod: ModuleType) -> None:
        """Tell the rank grouping what Megatron built: pipeline stages hold different layers;
        tensor, context, data and expert parallelism split evenly (Megatron checks that they
        divide), so their coordinates hold the same sizes."""
        original = mod.initialize_model_parallel
        layout = self.tracer.layout

        @functools.wraps(original)
        def initialize_model_parallel(*args, **kwargs):
            out = original(*args, **kwargs)
            if layout is not None:
                declare_layout(mod, layout, kwargs.get("order", "tp-cp-ep-dp-pp"))
            return out

        self.replace(mod, "initialize_model_parallel", initialize_model_parallel)

    # -- phases ------------------------------------------------------------------------------
    def schedules(self, mod: ModuleType) -> None:
        phases = self.tracer.phases
        for name in SCHEDULES:
            original = getattr(mod, name, None)
            if original is None:
                continue

            @functools.wraps(original)
            def schedule(*args, __original=original, **kwargs):
                phases.on_top_level_forward()  # forward_backward_iter_N begins (or stops)
                return __original(*args, **kwargs)

            self.patcher.setattr(mod, name, schedule)

    def optimizer(self, mod: ModuleType) -> None:
        phases = self.tracer.phases
        plugin = self

        def wrap_step(cls) -> None:
            original = cls.step

            @functools.wraps(original)
            def step(self, *args, **kwargs):
                phases.on_step_begin()
                try:
                    if not getattr(self, "_memlens_states_marked", False):
                        plugin.mark_main_params(self)
                    return original(self, *args, **kwargs)
                finally:
                    phases.on_step_end()

            self.patcher.setattr(cls, "step", step)

        for cls in (mod.MegatronOptimizer, *_subclasses(mod.MegatronOptimizer)):
            if "step" in vars(cls):
                wrap_step(cls)

    def fused_adam(self, mod: ModuleType) -> None:
        """Without Transformer Engine and apex Megatron runs torch's foreach Adam, whose
        full-size temporaries a GPU job's FusedAdam does not allocate: the fused one instead."""
        if not getattr(mod, "USING_PYTORCH_OPTIMIZER", False):
            return
        self.patcher.setattr(mod, "Adam", self.fused_adam_class())
        self.patcher.setattr(mod, "USING_PYTORCH_OPTIMIZER", False)

    def distributed_optimizer(self, mod: ModuleType) -> None:
        """The distributed optimizer accepts only its own module's Adam: the same stand-in,
        whose step count is a group's host integer, as apex's FusedAdam keeps it."""
        if getattr(mod, "HAVE_APEX_OR_TE", True):
            return
        self.patcher.setattr(mod, "Adam", self.fused_adam_class())
        self.patcher.setattr(mod, "HAVE_APEX_OR_TE", True)
        self.patcher.setattr(mod, "USING_APEX_OPTIMIZER", True)

    def fused_adam_class(self) -> type:
        if self._fused_adam is None:
            from .megatron_optimizer import fused_adam_class

            plugin = self

            class FusedAdam(fused_adam_class()):
                def __init__(self, *args, **kwargs):
                    plugin.note("Transformer Engine and apex are not installed here: Adam "
                                "holds what their FusedAdam, which Megatron selects on a GPU, "
                                "holds (two moments per parameter, updated in place: no "
                                "per-step full-size temporaries), not what torch's foreach "
                                "fallback allocates")
                    super().__init__(*args, **kwargs)

            self._fused_adam = FusedAdam
        return self._fused_adam

    def mark_main_params(self, optimizer) -> None:
        """The fp32 copies the inner torch optimizer updates are optimizer state (Megatron's
        12 bytes per parameter: main parameter, exp_avg, exp_avg_sq), owned by the module of
        the parameter they copy (so are the Adam moments the classifier finds for them)."""
        chained = vars(optimizer).get("chained_optimizers")
        for sub in chained or ():
            self.mark_main_params(sub)
        owners = self.tracer.modules.param_owner
        for model_attr, main_attr in _MAIN_PARAM_GROUPS:
            for models, mains in zip(vars(optimizer).get(model_attr) or (),
                                     vars(optimizer).get(main_attr) or ()):
                for model, main in zip(models, mains):
                    owner = owners.get(id(model))
                    if owner is not None:
                        owners[id(main)] = owner
                    self.tracer.classifier.pin(main, C.OPTIMIZER_STATE, owner)
        optimizer._memlens_states_marked = True

    # -- buffers -----------------------------------------------------------------------------
    def buffers(self, mod: ModuleType) -> None:
        cls = mod.DistributedDataParallel
        original = cls.__init__
        tracer = self.tracer

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            owner = tracer.modules.index_of(self)  # the buffers' padding belongs to no layer
            for buffer in [*getattr(self, "buffers", ()),
                           *getattr(self, "expert_parallel_buffers", ())]:
                for name, category in (("param_data", C.PARAMETER), ("grad_data", C.GRADIENT)):
                    data = getattr(buffer, name, None)
                    if data is not None:
                        tracer.classifier.pin(data, category, owner)
                        share_by_parameter(tracer, buffer, data)

        self.patcher.setattr(cls, "__init__", __init__)

    # -- host reads -------------------------------------------------------------------------
    def utils(self, mod: ModuleType) -> None:
        """Without apex and Transformer Engine, Megatron's gradient norm builds a host tensor
        from every per-tensor norm (reading each one's value): the same norms, stacked on the
        device instead."""
        import torch

        def local_multi_tensor_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
            norms = [torch.norm(t) for tensors in tensor_lists for t in tensors]
            total = torch.norm(torch.stack(norms)) if norms else \
                torch.zeros((), device="cuda")
            return total.reshape(1).float(), None

        if hasattr(mod, "local_multi_tensor_l2_norm"):
            self.replace(mod, "local_multi_tensor_l2_norm", local_multi_tensor_l2_norm)

    # -- RNG ---------------------------------------------------------------------------------
    def rng(self, mod: ModuleType) -> None:
        from . import megatron_rng

        self.replace(mod, "_get_cuda_rng_state", megatron_rng.get_state)
        self.replace(mod, "_set_cuda_rng_state", megatron_rng.set_state)
        self.patcher.setattr(mod.CudaRNGStatesTracker, "fork", megatron_rng.fork)

    # -- norms -------------------------------------------------------------------------------
    def torch_norm(self, mod: ModuleType) -> None:
        """Megatron's torch-norm fallback (no apex, no TE) as a GPU would run it:
        - RMSNorm as the fused kernel CUDA builds of torch (and TE, apex) run: it keeps its
          input and an fp32 statistic, not the decomposition's fp32 copies (megatron_norm.py);
        - sequence parallelism and the persistent kernel flag, which it refuses, as apex's
          FusedLayerNorm takes them (the same saved tensors): weights marked for the
          tensor-parallel gradient all-reduce under sequence parallelism."""
        import copy

        import torch

        from .megatron_norm import fused_rms_norm_class

        original = mod.WrappedTorchNorm.__new__
        plugin = self

        @functools.wraps(original)
        def __new__(cls, config, *args, **kwargs):
            sp = getattr(config, "sequence_parallel", False)
            if sp or getattr(config, "persist_layer_norm", False):
                plain = copy.copy(config)
                plain.sequence_parallel = plain.persist_layer_norm = False
                plugin.note("apex is not installed: torch's LayerNorm/RMSNorm stands in for "
                            "apex's FusedLayerNorm (the same saved tensors)" +
                            (", its weights marked sequence-parallel as apex marks them" if sp
                             else ""))
            else:
                plain = config
            norm = original(cls, plain, *args, **kwargs)
            if type(norm) is torch.nn.RMSNorm:
                norm.__class__ = fused_rms_norm_class()
                plugin.note("RMSNorm runs as CUDA's fused kernel does: it keeps its input and "
                            "an fp32 statistic per row (the CPU build would decompose it)")
            for p in norm.parameters():
                p.sequence_parallel = sp
            return norm

        self.patcher.setattr(mod.WrappedTorchNorm, "__new__", staticmethod(__new__))

    def tp_layers(self, mod: ModuleType) -> None:
        """Gradient accumulation fusion (Megatron-LM's default) needs apex's CUDA extension,
        whose kernel adds the weight gradient straight into the fp32 gradient buffer and
        allocates nothing. Stand in for it with a kernel that does the same to memory (no
        values in a trace), so the run keeps the configured fusion."""
        if getattr(mod, "_grad_accum_fusion_available", True):
            return
        plugin = self

        def wgrad_gemm_accum(total_input, grad_output, main_grad) -> None:
            plugin.note("apex is not installed: its fused weight-gradient accumulation "
                        "(--gradient-accumulation-fusion) stood in for by a kernel that, like "
                        "it, writes into the fp32 gradient buffer and allocates nothing")

        from types import SimpleNamespace

        kernels = SimpleNamespace(wgrad_gemm_accum_fp32=wgrad_gemm_accum,
                                  wgrad_gemm_accum_fp16=wgrad_gemm_accum)
        self.patcher.setattr(mod, "fused_weight_gradient_mlp_cuda", kernels)
        self.patcher.setattr(mod, "_grad_accum_fusion_available", True)

    # -- Transformer Engine absent ----------------------------------------------------------
    def want_flash_attention(self) -> None:
        from .megatron_attention import flash_attention_class

        self.flash_attention = True
        self.note("Transformer Engine is not installed here: layers use Megatron's local "
                  "modules, with core attention holding what the configured TE attention "
                  "backend holds")
        self.patcher.setattr(flash_attention_class(), "notify", staticmethod(self.note))

    def layer_specs(self, mod: ModuleType) -> None:
        """Layer specs asked for with Transformer Engine where it is absent: the local spec, with
        attention as TE holds memory; the local spec after that, the same way."""
        from .megatron_attention import use_flash

        plugin, have_te = self, getattr(mod, "HAVE_TE", True)
        local, te_spec = mod.get_gpt_layer_local_spec, mod.get_gpt_layer_with_transformer_engine_spec
        decoder = getattr(mod, "get_gpt_decoder_layer_specs", None)

        @functools.wraps(local)
        def get_gpt_layer_local_spec(*args, **kwargs):
            spec = local(*args, **kwargs)
            if plugin.flash_attention:
                use_flash(spec)
            return spec

        @functools.wraps(te_spec)
        def get_gpt_layer_with_transformer_engine_spec(*args, **kwargs):
            if have_te:
                return te_spec(*args, **kwargs)
            plugin.want_flash_attention()
            keep = ("num_experts", "moe_grouped_gemm", "qk_layernorm", "multi_latent_attention",
                    "moe_use_legacy_grouped_gemm", "qk_l2_norm")
            named = dict(zip(keep, args))
            named.update({k: v for k, v in kwargs.items() if k in keep})
            return get_gpt_layer_local_spec(**named)

        self.replace(mod, "get_gpt_layer_local_spec", get_gpt_layer_local_spec)
        self.replace(mod, "get_gpt_layer_with_transformer_engine_spec",
                     get_gpt_layer_with_transformer_engine_spec)
        if decoder is None:
            return

        @functools.wraps(decoder)
        def get_gpt_decoder_layer_specs(config, use_transformer_engine, *args, **kwargs):
            if use_transformer_engine and not have_te:
                plugin.want_flash_attention()
                use_transformer_engine = False
            return decoder(config, use_transformer_engine, *args, **kwargs)

        self.replace(mod, "get_gpt_decoder_layer_specs", get_gpt_decoder_layer_specs)

    def rope_utils(self, mod: ModuleType) -> None:
        """Fused RoPE (Megatron-LM's default) is Transformer Engine's kernel: it writes the
        rotated tensor and keeps only the frequencies for backward (the unfused path keeps
        more). Stand in for it when TE is absent."""
        if getattr(mod, "fused_apply_rotary_pos_emb", True) is not None:
            return
        plugin = self

        def fused_apply_rotary_pos_emb(t, freqs, *args, **kwargs):
            plugin.note("Transformer Engine is not installed here: its fused RoPE stood in by "
                        "a kernel that, like it, writes a new tensor and keeps only the "
                        "frequencies for backward")
            return fused_rope_function().apply(t, freqs)

        self.patcher.setattr(mod, "fused_apply_rotary_pos_emb", fused_apply_rotary_pos_emb)

    # -- Megatron-LM's training loop --------------------------------------------------------
    def arguments(self, mod: ModuleType) -> None:
        from . import megatron_args

        original = mod.validate_args
        tracer, plugin = self.tracer, self

        @functools.wraps(original)
        def validate_args(args, *rest, **kwargs):
            out = original(args, *rest, **kwargs)  # the user's arguments, as given
            te = getattr(args, "transformer_impl", None) == "transformer_engine"
            for text in megatron_args.set_up(args, tracer.iterations):
                plugin.note(text)
            if te and args.transformer_impl == "local":
                plugin.want_flash_attention()
            return out

        self.replace(mod, "validate_args", validate_args)

    def initialize(self, mod: ModuleType) -> None:
        """No compiling of dataset helpers and fused kernels: the trace runs none of them."""
        if hasattr(mod, "_compile_dependencies"):
            self.replace(mod, "_compile_dependencies", lambda *a, **k: None)

    def training(self, mod: ModuleType) -> None:
        """Mock batches instead of datasets and data loaders."""
        if not hasattr(mod, "build_train_valid_test_data_iterators"):
            return

        def build_train_valid_test_data_iterators(*args, **kwargs):
            from megatron.training import get_args

            margs = get_args()
            # What Megatron learns from the loaders it builds (and broadcasts from rank 0).
            margs.do_train, margs.do_valid, margs.do_test = True, False, False
            return mock_iterator(mod, margs), None, None

        self.replace(mod, "build_train_valid_test_data_iterators",
                     build_train_valid_test_data_iterators)

    def training_utils(self, mod: ModuleType) -> None:
        """Whether every model-parallel rank stepped is read back out of an all-reduced tensor:
        every rank of the simulated job runs the same step, so it is this rank's answer."""
        if hasattr(mod, "logical_and_across_model_parallel_group"):
            self.replace(mod, "logical_and_across_model_parallel_group", lambda value: bool(value))
        if hasattr(mod, "get_batch_on_this_tp_rank"):
            self.replace(mod, "get_batch_on_this_tp_rank",
                         _as_first_tp_rank(mod.get_batch_on_this_tp_rank))

    # -- MoE ---------------------------------------------------------------------------------
    def transformer_config(self, mod: ModuleType) -> None:
        cls = mod.TransformerConfig
        original = cls.__post_init__
        plugin = self

        @functools.wraps(original)
        def __post_init__(self):
            if getattr(self, "num_moe_experts", None):
                plugin.drop_and_pad(self)
            original(self)

        self.patcher.setattr(cls, "__post_init__", __post_init__)

    def moe_utils(self, mod: ModuleType) -> None:
        """megatron-core 0.16 imports `te_general_gemm` only with Transformer Engine but its
        router tests `te_general_gemm is not None` either way: a NameError without TE. Define
        the name as the code means it (absent)."""
        if not getattr(mod, "HAVE_TE", True) and not hasattr(mod, "te_general_gemm"):
            self.patcher.setattr(mod, "te_general_gemm", None)

    def token_dispatcher(self, mod: ModuleType) -> None:
        """At capacity the tokens per local expert are a known constant, which Megatron keeps
        in a host tensor made with torch.full (and reads back with .tolist()): under the fake
        mode it would be a fake tensor without values. Make it the real host tensor it is."""
        cls = mod.MoEAlltoAllTokenDispatcher
        original = cls.preprocess

        @functools.wraps(original)
        def preprocess(self, routing_map):
            out = original(self, routing_map)
            if getattr(self, "drop_and_pad", False) and out.device.type == "cpu":
                from torch._subclasses.fake_tensor import unset_fake_temporarily

                with unset_fake_temporarily():
                    import torch

                    out = torch.full(tuple(out.shape), self.capacity * self.tp_size * self.ep_size,
                                     dtype=out.dtype)
            return out

        self.patcher.setattr(cls, "preprocess", preprocess)

    def drop_and_pad(self, config) -> None:
        config.moe_expert_capacity_factor = 1.0
        config.moe_pad_expert_input_to_capacity = True
        self.note("MoE routing: tokens dropped and padded at capacity factor 1.0 (every expert "
                  "gets exactly its share of tokens: uniform expert load), whatever the "
                  "configuration asked; a trace has no router values to route by")


def _as_first_tp_rank(get_batch):
    """Tensor-parallel ranks other than the first receive the batch by broadcast, after reading
    its sizes out of broadcast tensors (values a trace does not have). They hold the same
    tensors as the first rank: let them read the mock batch as it does."""
    @functools.wraps(get_batch)
    def wrapper(data_iterator, *args, **kwargs):
        from megatron.core import parallel_state

        if data_iterator is None or parallel_state.get_tensor_model_parallel_rank() == 0:
            return get_batch(data_iterator, *args, **kwargs)
        with Patcher.swapped(parallel_state, "get_tensor_model_parallel_rank",
                             lambda *a, **k: 0):
            return get_batch(data_iterator, *args, **kwargs)

    return wrapper


def _megatron_modules() -> list[ModuleType]:
    return [m for n, m in list(sys.modules.items())
            if isinstance(m, ModuleType) and (n.startswith("megatron.") or n in _ENTRY_POINTS)]


def _subclasses(cls) -> list:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


