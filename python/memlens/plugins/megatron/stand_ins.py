"""Patches for Megatron where Transformer Engine or apex is not installed (the usual case on a
CPU-only machine): the kernels a GPU job would run are stood in for by ones with the same
memory, so the trace keeps the configuration's memory rather than the fallback's. The stand-ins
themselves are in attention.py, kernels.py, norm.py; docs/megatron.md
has the list. Each patch is `patch(plugin, module)` (the plugin is __init__.py).
"""

from __future__ import annotations

import functools
from importlib.util import find_spec
from types import ModuleType

from .kernels import fused_rope_function


def torch_norm(plugin, mod: ModuleType) -> None:
    """Megatron's torch-norm fallback (no apex, no TE) as a GPU would run it:
    - RMSNorm as the fused kernel CUDA builds of torch (and TE, apex) run: it keeps its
      input and an fp32 statistic, not the decomposition's fp32 copies (norm.py);
    - sequence parallelism, the persistent kernel flag and zero-centered gamma
      (`--apply-layernorm-1p`), which it refuses, as apex's FusedLayerNorm takes them (the same saved tensors): weights marked for the
      tensor-parallel gradient all-reduce under sequence parallelism."""
    import copy

    import torch

    from .norm import fused_rms_norm_class

    original = mod.WrappedTorchNorm.__new__

    @functools.wraps(original)
    def __new__(cls, config, *args, **kwargs):
        sp = getattr(config, "sequence_parallel", False)
        one_p = getattr(config, "layernorm_zero_centered_gamma", False)
        if sp or one_p or getattr(config, "persist_layer_norm", False):
            plain = copy.copy(config)
            plain.sequence_parallel = plain.persist_layer_norm = False
            plain.layernorm_zero_centered_gamma = False
            plugin.note("apex is not installed: torch's LayerNorm/RMSNorm stands in for "
                        "apex's FusedLayerNorm (the same saved tensors)" +
                        (", its weights marked sequence-parallel as apex marks them" if sp
                         else "") +
                        ("; zero-centered gamma (--apply-layernorm-1p) adds 1 to the weight "
                         "inside the fused kernel, which holds nothing more" if one_p else ""))
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

    plugin.patcher.setattr(mod.WrappedTorchNorm, "__new__", staticmethod(__new__))


def tp_layers(plugin, mod: ModuleType) -> None:
    """Gradient accumulation fusion (Megatron-LM's default) needs apex's CUDA extension,
    whose kernel adds the weight gradient straight into the fp32 gradient buffer and
    allocates nothing. Stand in for it with a kernel that does the same to memory (no
    values in a trace), so the run keeps the configured fusion; and the dummy weight gradient
    the layers hand DDP then, as where TE is installed (te_wgrad.py)."""
    from .te_wgrad import megatron_linears

    megatron_linears(plugin, mod)
    if getattr(mod, "_grad_accum_fusion_available", True):
        return

    def wgrad_gemm_accum(total_input, grad_output, main_grad) -> None:
        from .te_gemm import take_in_current_module

        take_in_current_module(plugin, main_grad.device, weight_gradient=True)
        plugin.note("apex is not installed: its fused weight-gradient accumulation "
                    "(--gradient-accumulation-fusion) stood in for by a kernel that, like "
                    "it, writes into the fp32 gradient buffer and allocates nothing")

    import sys

    name = "fused_weight_gradient_mlp_cuda"
    kernels = ModuleType(name, "memlens' stand-in for apex's fused weight-gradient kernels")
    kernels.wgrad_gemm_accum_fp32 = kernels.wgrad_gemm_accum_fp16 = wgrad_gemm_accum
    plugin.patcher.setattr(mod, name, kernels)
    plugin.patcher.setattr(mod, "_grad_accum_fusion_available", True)
    if name not in sys.modules:
        # Also importable: the pipeline flush of --defer-embedding-wgrad-compute imports it
        # itself (megatron.core.utils.drain_embedding_wgrad_compute).
        sys.modules[name] = kernels
        plugin.patcher.defer(lambda: sys.modules.pop(name, None))


def want_flash_attention(plugin) -> None:
    """Transformer Engine was asked for and is absent: core attention as TE holds it."""
    from . import te_gemm
    from .attention import flash_attention_class

    plugin.flash_attention = True
    te_gemm.install(plugin)
    plugin.note("Transformer Engine is not installed here: layers use Megatron's local "
                "modules, with core attention holding what the configured TE attention "
                "backend holds")
    plugin.patcher.setattr(flash_attention_class(), "notify", staticmethod(plugin.note))


def as_te_holds(spec) -> None:
    """A local layer spec (ModuleSpec tree) made to hold what TE's layers hold: core attention
    as TE's (attention.py) and the linear layers' GEMMs on TE's workspace (te_gemm.py)."""
    from .attention import use_flash
    from .te_gemm import use_te_gemms

    use_flash(spec)
    use_te_gemms(spec)


def layer_specs(plugin, mod: ModuleType) -> None:
    """Layer specs asked for with Transformer Engine where it is absent: the local spec, with
    attention as TE holds memory, the linear layers' GEMMs on TE's workspace (te_gemm.py) and,
    with grouped GEMM asked for, TE's grouped experts on the stand-in for its GroupedLinear
    (grouped_linear.py); the local spec after that, the same way."""
    import inspect

    from .grouped_linear import swap_experts

    have_te = getattr(mod, "HAVE_TE", True)
    local, te_spec = mod.get_gpt_layer_local_spec, mod.get_gpt_layer_with_transformer_engine_spec
    decoder = getattr(mod, "get_gpt_decoder_layer_specs", None)

    @functools.wraps(local)
    def get_gpt_layer_local_spec(*args, **kwargs):
        spec = local(*args, **kwargs)
        if plugin.flash_attention:  # TE's layers asked for: its attention and GEMMs
            as_te_holds(spec)
            asked = inspect.signature(local).bind_partial(*args, **kwargs).arguments
            if asked.get("moe_grouped_gemm") and asked.get("num_experts"):
                swap_experts(plugin, spec)
        return spec

    @functools.wraps(te_spec)
    def get_gpt_layer_with_transformer_engine_spec(*args, **kwargs):
        if have_te:
            return te_spec(*args, **kwargs)
        want_flash_attention(plugin)
        keep = ("num_experts", "moe_grouped_gemm", "qk_layernorm", "multi_latent_attention",
                "moe_use_legacy_grouped_gemm", "qk_l2_norm")
        named = dict(zip(keep, args))
        named.update({k: v for k, v in kwargs.items() if k in keep})
        return get_gpt_layer_local_spec(**named)

    plugin.replace(mod, "get_gpt_layer_local_spec", get_gpt_layer_local_spec)
    plugin.replace(mod, "get_gpt_layer_with_transformer_engine_spec",
                   get_gpt_layer_with_transformer_engine_spec)
    if decoder is None:
        return

    @functools.wraps(decoder)
    def get_gpt_decoder_layer_specs(config, use_transformer_engine, *args, **kwargs):
        if use_transformer_engine and not have_te:
            want_flash_attention(plugin)
            use_transformer_engine = False
        return decoder(config, use_transformer_engine, *args, **kwargs)

    plugin.replace(mod, "get_gpt_decoder_layer_specs", get_gpt_decoder_layer_specs)


def bert_layer_specs(plugin, mod: ModuleType) -> None:
    """BERT's Transformer Engine spec where TE is absent: Megatron raises ImportError when it is
    built, and examples/bert/pretrain_bert.py builds it on import (its default spec), so even
    `--spec local` stopped. It becomes a copy of the local spec, with attention as TE holds
    memory and the linear layers' GEMMs on TE's workspace, as for GPT (layer_specs above)."""
    if getattr(mod, "HAVE_TE", True) or not hasattr(mod, "bert_layer_local_spec"):
        return
    import copy

    def get_bert_layer_with_transformer_engine_spec():
        want_flash_attention(plugin)
        spec = copy.deepcopy(mod.bert_layer_local_spec)
        as_te_holds(spec)
        return spec

    plugin.replace(mod, "get_bert_layer_with_transformer_engine_spec",
                   get_bert_layer_with_transformer_engine_spec)
    if hasattr(mod, "get_bert_layer_with_transformer_engine_submodules"):  # 0.19
        plugin.replace(mod, "get_bert_layer_with_transformer_engine_submodules",
                       lambda: get_bert_layer_with_transformer_engine_spec().submodules)


def t5_block_specs(plugin, mod: ModuleType) -> None:
    """T5's block specs where Transformer Engine is absent: its TE ones are built from TE's
    modules (None here), and Megatron-LM's pretrain_t5.py, whose --transformer-impl memlens
    turns to local, builds the local ones. Either way, when TE's layers were asked for, the
    layers are the local spec's with attention as TE holds memory and the linear layers' GEMMs
    on TE's workspace, as for GPT (layer_specs above)."""
    if find_spec("transformer_engine") is not None or \
            not hasattr(mod, "get_t5_encoder_with_local_block_spec"):
        return

    def as_te(local):
        @functools.wraps(local)
        def block_spec(num_layers):
            spec = local(num_layers)
            if plugin.flash_attention:  # TE's layers asked for
                for layer in {id(s): s for s in spec.layer_specs}.values():
                    as_te_holds(layer)
            return spec
        return block_spec

    for part in ("encoder", "decoder"):
        local = as_te(getattr(mod, f"get_t5_{part}_with_local_block_spec"))
        plugin.replace(mod, f"get_t5_{part}_with_local_block_spec", local)

        def te_block_spec(num_layers, __local=local):
            want_flash_attention(plugin)
            return __local(num_layers)

        plugin.replace(mod, f"get_t5_{part}_with_transformer_engine_block_spec", te_block_spec)


# The submodules of the hybrid specs built with TE's modules (by id; the spec kept alive).
TE_STACKS: dict[int, object] = {}


def hybrid_layer_specs(plugin, mod: ModuleType) -> None:
    """The hybrid (Mamba) stack's specs are built from Transformer Engine's modules only, at
    import (`--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec`; 0.16's
    `megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec`). Where TE is absent each
    becomes a copy with Megatron's modules as TE holds memory: the norm-fused linear as norm
    then linear (te_gemm.layer_norm_column_parallel_class), the linear layers' GEMMs on TE's
    workspace, TE's norm as Megatron's, core attention as TE's, and the MoE layers' experts
    as TEGroupedMLP on the stand-in for TE's grouped linear layers (grouped_linear.py)."""
    if find_spec("transformer_engine") is not None:
        return
    from megatron.core.extensions import transformer_engine as te_ext
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from .attention import flash_attention_class
    from .grouped_linear import layer_classes, swap_experts
    from .spec_swap import copy_spec, swap_in_spec
    from .te_gemm import layer_norm_column_parallel_class, te_gemm_class

    specs = [(name, value) for name, value in vars(mod).items()
             if isinstance(value, ModuleSpec)]
    if not specs:
        return
    # 0.19's GPT scripts import this module too (megatron.training.models): TE counts as
    # asked for only when a stack is built from one of these specs (hybrid_block below).
    column, row = layer_classes(plugin)
    local = {"TELayerNormColumnParallelLinear": layer_norm_column_parallel_class(),
             "TEColumnParallelLinear": te_gemm_class(ColumnParallelLinear),
             "TERowParallelLinear": te_gemm_class(RowParallelLinear),
             "TENorm": WrappedTorchNorm, "TEDotProductAttention": flash_attention_class(),
             "TEColumnParallelGroupedLinear": column, "TERowParallelGroupedLinear": row}
    swaps = {getattr(te_ext, name): cls for name, cls in local.items()
             if getattr(te_ext, name, None) is not None}
    copies = {}  # one copy per spec: 0.19's mamba_stack_spec is hybrid_stack_spec
    plugin.patcher.defer(TE_STACKS.clear)
    for name, spec in specs:
        if id(spec) not in copies:
            copies[id(spec)] = copy_spec(spec)
            swap_in_spec(copies[id(spec)],
                         lambda value: swaps.get(value) if isinstance(value, type) else None)
            # 0.19's TE spec falls back to SequentialMLP where TE's grouped layers are None;
            # on a GPU it is TEGroupedMLP (the stack's MoE spec asks for grouped GEMM)
            swap_experts(plugin, copies[id(spec)])
            TE_STACKS[id(copies[id(spec)].submodules)] = copies[id(spec)]
        plugin.patcher.setattr(mod, name, copies[id(spec)])


def hybrid_block(plugin, mod: ModuleType) -> None:
    """The hybrid stack builds its final norm as TE's norm itself (and fuses MLA's down
    projections into TE's norm-fused linear): where TE is absent, Megatron's norm and the
    norm-fused linear's stand-in, in this module only."""
    if find_spec("transformer_engine") is not None or not hasattr(mod, "TENorm"):
        return
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from .te_gemm import layer_norm_column_parallel_class

    plugin.patcher.setattr(mod, "TENorm", WrappedTorchNorm)
    if hasattr(mod, "TELayerNormColumnParallelLinear"):
        plugin.patcher.setattr(mod, "TELayerNormColumnParallelLinear",
                               layer_norm_column_parallel_class())
    stack = getattr(mod, "HybridStack", None) or getattr(mod, "MambaStack", None)
    if stack is None:
        return
    original = stack.__init__

    @functools.wraps(original)
    def __init__(self, config, submodules=None, *args, **kwargs):
        if id(submodules) in TE_STACKS:  # built from TE's spec: its attention and GEMMs
            want_flash_attention(plugin)
        original(self, config, submodules, *args, **kwargs)

    plugin.patcher.setattr(stack, "__init__", __init__)


def te_extension_mocks(plugin, mod: ModuleType) -> None:
    """megatron-core 0.16 without Transformer Engine: its TE extension module defines its
    classes on a MagicMock of `te` (`class TELinear(te.pytorch.Linear)` is then a mock, not a
    class), and Megatron's modules test `isinstance(module, TELinear)` (multi-latent attention,
    the Megatron-FSDP adapter): a TypeError. Each such name becomes a class nothing is an
    instance of, which answers as a GPU run's check does for Megatron's own modules."""
    for name, value in list(vars(mod).items()):
        if name.startswith("TE") and not isinstance(value, type) and \
                type(value).__module__ == "unittest.mock":
            plugin.replace(mod, name, type(name, (), {
                "__doc__": f"Transformer Engine is not installed: no module is a {name} "
                           "(memlens/plugins/megatron/stand_ins.py)"}))


def flextron_router(plugin, mod: ModuleType) -> None:
    """Megatron-LM 0.19's Flextron router (megatron/elastification) builds its two linear
    layers from TE's classes whenever Megatron's TE extension module imports, which it does
    without TE (those classes then cannot be built): its own fallback instead, Megatron's
    ColumnParallelLinear and RowParallelLinear, the same weights. Written for 0.19's
    `hybrid_flex_router.py`, whose `HAVE_TE` chooses between the two."""
    if find_spec("transformer_engine") is not None or not getattr(mod, "HAVE_TE", False):
        return
    from megatron.core.tensor_parallel import layers

    plugin.note("Transformer Engine is not installed here: Flextron's router uses Megatron's "
                "own parallel linear layers (its fallback), the same weights as TE's")
    plugin.patcher.setattr(mod, "HAVE_TE", False)
    plugin.patcher.setattr(mod, "ColumnParallelLinear", layers.ColumnParallelLinear)
    plugin.patcher.setattr(mod, "RowParallelLinear", layers.RowParallelLinear)


def modelopt_norm(plugin, mod: ModuleType) -> None:
    """Megatron's ModelOpt model specs (`megatron/core/post_training/modelopt`, taken by
    `pretrain_gpt.py` when ModelOpt's `--export-*` arguments are given) build every norm from
    TE's LayerNorm or RMSNorm (`layers.Norm`), which raises ImportError without TE: Megatron's
    torch norm instead, which keeps what TE's norm kernels keep (the input and an fp32
    statistic per row) and marks its weights sequence-parallel alike (`torch_norm` above).
    Written for `layers.py` of megatron-core 0.16 to 0.19, whose `HAVE_TE` says which it
    builds."""
    if find_spec("transformer_engine") is not None or getattr(mod, "HAVE_TE", True) or \
            not isinstance(getattr(mod, "Norm", None), type):
        return
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    class Norm:
        """TE's LayerNorm/RMSNorm for ModelOpt's specs, as Megatron's torch norm (memlens/
        plugins/megatron/stand_ins.py)."""

        def __new__(cls, config, hidden_size: int, eps: float = 1e-5):
            plugin.note("Transformer Engine is not installed here: the norms of ModelOpt's "
                        "model spec are Megatron's torch norm, which keeps what TE's keep")
            return WrappedTorchNorm(config=config, hidden_size=hidden_size, eps=eps)

    plugin.patcher.setattr(mod, "Norm", Norm)


def modelopt_gpt_spec(plugin, mod: ModuleType) -> None:
    """ModelOpt's GPT spec takes TE's core attention (`TEDotProductAttention`) unless asked for
    Megatron's local one, and without TE that name is a class that cannot be built. The
    stand-in instead, which holds what the configured TE attention backend holds
    (attention.py), as the TE layer spec gets where TE is absent. The spec's linear layers are
    Megatron's own. Written for `gpt/model_specs.py` of megatron-core 0.16 to 0.19."""
    if find_spec("transformer_engine") is not None or not hasattr(mod, "TEDotProductAttention"):
        return
    from .attention import flash_attention_class

    attention = flash_attention_class()
    plugin.patcher.setattr(attention, "notify", staticmethod(plugin.note))
    plugin.patcher.setattr(mod, "TEDotProductAttention", attention)


def rope_utils(plugin, mod: ModuleType) -> None:
    """Fused RoPE (Megatron-LM's default) is Transformer Engine's kernel: it writes the
    rotated tensor and keeps only the frequencies for backward (the unfused path keeps
    more). Stand in for it when TE is absent."""
    if getattr(mod, "fused_apply_rotary_pos_emb", True) is not None:
        return

    def fused_apply_rotary_pos_emb(t, freqs, *args, **kwargs):
        plugin.note("Transformer Engine is not installed here: its fused RoPE stood in by "
                    "a kernel that, like it, writes a new tensor and keeps only the "
                    "frequencies for backward")
        return fused_rope_function().apply(t, freqs)

    plugin.patcher.setattr(mod, "fused_apply_rotary_pos_emb", fused_apply_rotary_pos_emb)


# The Transformer Engine whose memory the stand-ins hold (grouped_linear.py, te_gemm.py, ...).
STAND_IN_TE_VERSION = "2.10.0"


def te_version_checks(plugin, mod: ModuleType) -> None:
    """TransformerConfig's and Megatron-LM's argument checks ask the installed TE's version for
    what a configuration uses (MoE FP8 1.7, FP8 grouped GEMM 1.11, FP8 `moe_act` recompute
    2.6, deferred weight gradients with overlapped reduction 2.8, ...): without TE,
    0.19 answers 0.0.0 and refuses them, 0.16 compares None and raises TypeError. The
    stand-ins run in TE's place, so the checks are answered as TE 2.10 would answer them: what
    needs a newer TE is still refused by Megatron's own message, naming that version."""
    if find_spec("transformer_engine") is not None or not hasattr(mod, "is_te_min_version"):
        return
    from packaging.version import Version

    te = Version(STAND_IN_TE_VERSION)

    def is_te_min_version(version, check_equality=True):
        plugin.note(f"Transformer Engine is not installed here: Megatron's configuration checks "
                    f"of its version are answered as TE {STAND_IN_TE_VERSION}, whose memory "
                    "memlens' stand-ins hold")
        return te >= Version(version) if check_equality else te > Version(version)

    plugin.patcher.setattr(mod, "is_te_min_version", is_te_min_version)
    if hasattr(mod, "get_te_version"):  # named in TransformerConfig's messages
        plugin.patcher.setattr(mod, "get_te_version", lambda: te)


PATCHES = {
    "megatron.core.transformer.transformer_config": te_version_checks,
    "megatron.training.arguments": te_version_checks,
    "megatron.core.transformer.cuda_graphs": te_version_checks,  # what it asks TE's graphs
    "megatron.core.transformer.transformer_layer": te_version_checks,  # and for their replay
    # BERT's attention mask: [b, 1, 1, s] for TE >= 1.10's padding mask, as on a GPU with TE
    "megatron.core.models.bert.bert_model": te_version_checks,
    "megatron.core.transformer.torch_norm": torch_norm,
    "megatron.core.tensor_parallel.layers": tp_layers,
    "megatron.core.models.gpt.gpt_layer_specs": layer_specs,
    "megatron.core.models.bert.bert_layer_specs": bert_layer_specs,
    "megatron.core.models.T5.t5_spec": t5_block_specs,
    "megatron.core.models.hybrid.hybrid_layer_specs": hybrid_layer_specs,
    "megatron.core.models.mamba.mamba_layer_specs": hybrid_layer_specs,  # 0.16's name
    "megatron.core.models.hybrid.hybrid_block": hybrid_block,
    "megatron.core.ssm.mamba_block": hybrid_block,  # 0.16's name
    "megatron.core.extensions.transformer_engine": te_extension_mocks,
    "megatron.core.models.common.embeddings.rope_utils": rope_utils,
    "megatron.elastification.router.hybrid_flex_router": flextron_router,
    "megatron.core.post_training.modelopt.layers": modelopt_norm,
    "megatron.core.post_training.modelopt.gpt.model_specs": modelopt_gpt_spec,
}
