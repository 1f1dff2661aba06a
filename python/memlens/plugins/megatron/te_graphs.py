"""Megatron's Transformer Engine CUDA graphs (`--cuda-graph-impl transformer_engine`) where TE is
not installed: TECudaGraphHelper asserts TE's graphs and imports `make_graphed_callables` from
TE, which graphed_callables.py stands in for; the capture is a phase of its own
(`cuda_graph_capture_after_iter_N`); TransformerLayer's replay imports TE only to fail without
it. How many steps a trace runs to reach the capture is args.py's (`traced_iterations`)."""

from __future__ import annotations

import contextlib
import functools
import sys
from importlib.util import find_spec
from types import ModuleType

from ...patches.patcher import Patcher
from .graphed_callables import make_graphed_callables_stand_in


def cuda_graphs(plugin, mod: ModuleType) -> None:
    """megatron.core.transformer.cuda_graphs: TECudaGraphHelper asserts TE's graphs and calls
    `make_graphed_callables`, which it imports from TE; its capture is a phase of its own."""
    helper = getattr(mod, "TECudaGraphHelper", None)
    if helper is None or getattr(mod, "HAVE_TE_GRAPHS", True):
        return
    plugin.patcher.setattr(mod, "make_graphed_callables",
                            make_graphed_callables_stand_in(plugin))
    init, create = helper.__init__, helper.create_cudagraphs

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        # Its assert only: HAVE_TE_GRAPHS stays false for the rest of the module, where
        # Megatron's local graphs read TE's other names under it.
        with Patcher.swapped(mod, "HAVE_TE_GRAPHS", True):
            init(self, *args, **kwargs)

    @functools.wraps(create)
    def create_cudagraphs(self, *args, **kwargs):
        phases = plugin.tracer.phases
        phases.begin_aside("cuda_graph_capture")
        try:
            return create(self, *args, **kwargs)
        finally:
            phases.end_aside()

    plugin.patcher.setattr(helper, "__init__", __init__)
    plugin.patcher.setattr(helper, "create_cudagraphs", create_cudagraphs)


def transformer_layer(plugin, mod: ModuleType) -> None:
    """TransformerLayer's replay arguments import `transformer_engine.pytorch` (unused but for
    failing without TE, "CUDAGraph requires TransformerEngine"): the import finds an empty
    module during that call only."""
    cls = getattr(mod, "TransformerLayer", None)
    original = vars(cls).get("_get_te_cuda_graph_replay_args") if cls is not None else None
    if original is None or find_spec("transformer_engine") is not None:
        return

    @functools.wraps(original)
    def _get_te_cuda_graph_replay_args(self, *args, **kwargs):
        with _empty_te_modules():
            return original(self, *args, **kwargs)

    plugin.patcher.setattr(cls, "_get_te_cuda_graph_replay_args", _get_te_cuda_graph_replay_args)


@contextlib.contextmanager
def _empty_te_modules():
    added = [name for name in ("transformer_engine", "transformer_engine.pytorch")
             if name not in sys.modules]
    for name in added:
        sys.modules[name] = ModuleType(name, "memlens: TE is not installed; an import only")
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


PATCHES = {"megatron.core.transformer.cuda_graphs": cuda_graphs,
           "megatron.core.transformer.transformer_layer": transformer_layer}
