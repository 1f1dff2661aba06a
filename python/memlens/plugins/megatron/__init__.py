"""Megatron-core (and Megatron-LM's training loop): what a trace needs from them, and nothing else.

Activated when `megatron.core` is imported inside a trace (plugins/__init__.py); every patch is
applied to a module right after it is imported, version-checked, and undone when the trace
ends. What the patches change about the run is listed in the snapshot's `meta.notes`.

This module is the plugin itself: its state (the tracer, one Patcher, the notes) and the table
of which module gets which patch. The patches live by what they are about:

- core.py: megatron-core's own machinery (parallel layout, schedules as phases, the
  optimizer and its main parameters, DDP buffers, the RNG tracker, host reads);
- stand_ins.py: Transformer Engine or apex absent: their kernels stood in for by
  ones with the same memory (norms, fused weight-gradient accumulation, TE layer specs and
  attention, fused RoPE; docs/megatron.md has the list); grouped_linear.py: TE's grouped
  experts' layers; recompute.py: the output-discarding checkpoint's TE names;
- activation_offload.py: Megatron's fine-grained activation offloading in a trace;
- fp8_linear.py, fp8_params.py: `--fp8-format` without Transformer Engine:
  GEMMs and FP8 parameters holding what TE's hold (the recipes' tensors: fp8.py);
- te_graphs.py: `--cuda-graph-impl transformer_engine` without TE: TE's make_graphed_callables
  (graphed_callables.py) on memlens' simulated CUDA graphs;
- nccl_allocator.py: `--use-nccl-ub`: NCCL's user-buffer allocator, not built, on memlens'
  simulated MemPool;
- moe.py: mixture of experts: the tokens per expert fixed by memlens' routing policy
  (routing.py), so shapes do not depend on router values a trace does not have;
- training.py: Megatron-LM's `megatron.training` (when present), set up for a trace
  (see args.py).
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType

from ...patches.patcher import Patcher
from ..context import PluginContext
from ..imports import ImportWatcher

# Megatron-LM's entry-point scripts and their helpers, which import Megatron's functions.
_ENTRY_POINTS = ("__main__", "gpt_builders", "mamba_builders", "model_provider")

_active: "MegatronPlugin | None" = None


class Plugin:
    """Made as `megatron.core` starts to be imported: nothing of it exists yet."""

    def __init__(self, tracer: PluginContext, watcher: ImportWatcher) -> None:
        global _active
        _active = MegatronPlugin(tracer)
        from . import kernels as megatron_kernels

        _active.kernels = megatron_kernels.install()
        for name, patch in _active.patches():
            watcher.watch(name, patch)

    def deactivate(self) -> None:
        global _active
        if _active is not None:
            _active.undo()
            _active = None


class MegatronPlugin:
    """What the patches share: the tracer, the one Patcher that undoes them all, the notes."""

    def __init__(self, tracer: PluginContext) -> None:
        self.tracer = tracer
        self.patcher = Patcher()
        self.kernels: list[str] = []  # stand-in CUDA extensions put in sys.modules
        # Transformer Engine was asked for but is not installed: attention as TE holds it.
        self.flash_attention = False
        self.fused_adam: type | None = None  # FusedAdam's stand-in, once Megatron asks
        self.fp8_recipe = None  # inside Megatron's FP8 context (TE absent): its recipe
        self.te_dummy_wgrads: dict = {}  # TE's get_dummy_wgrad cache (te_wgrad.py)
        self.grouped_linear_classes: tuple | None = None  # TE's grouped layers' stand-ins
        # TE's GEMM workspace taken by a stand-in GEMM (te_gemm.py), once TE is asked for:
        # (device, module=None, weight_gradient=False)
        self.te_gemm = lambda device, *args, **kwargs: None
        # TE's Userbuffers, once initialised (--tp-comm-overlap): (device, module,
        # weight_gradient) -> their workspace for a GEMM they overlap, or None (userbuffers.py)
        self.userbuffers = None

    def patches(self) -> list[tuple[str, object]]:
        """(module name, what to patch in it once it is imported), in order; a module may be
        patched by several parts."""
        from . import (activation_offload as megatron_offload, core as megatron_core,
                       ddp_hooks as megatron_ddp_hooks, fp8_linear as megatron_fp8_linear,
                       fp8_params as megatron_fp8_params,
                       grouped_linear as megatron_grouped_linear, mamba as megatron_mamba,
                       moe as megatron_moe, nccl_allocator as megatron_nccl_allocator,
                       recompute as megatron_recompute,
                       stand_ins as megatron_stand_ins, te_graphs as megatron_te_graphs,
                       training as megatron_training)

        return [(name, functools.partial(patch, self))
                for part in (megatron_core, megatron_ddp_hooks, megatron_stand_ins,
                             megatron_recompute, megatron_fp8_linear, megatron_fp8_params,
                             megatron_grouped_linear, megatron_moe,
                             megatron_mamba, megatron_offload, megatron_te_graphs,
                             megatron_nccl_allocator, megatron_training)
                for name, patch in part.PATCHES.items()]

    def replace(self, module: ModuleType, name: str, new) -> None:
        """Replace a module-level function, also where other Megatron modules bound it with
        `from module import name` (before or after the replacement: undone everywhere)."""
        self.patcher.replace_everywhere(module, name, new, megatron_modules)

    def undo(self) -> None:
        from . import kernels as megatron_kernels

        megatron_kernels.uninstall(self.kernels)
        self.patcher.undo()

    def note(self, text: str) -> None:
        if text not in self.tracer.notes:
            self.tracer.notes.append(text)


def megatron_modules() -> list[ModuleType]:
    return [m for n, m in list(sys.modules.items())
            if isinstance(m, ModuleType) and (n.startswith("megatron.") or n in _ENTRY_POINTS)]
