"""What Megatron built, told to memlens: its parallel layout (for grouping alike ranks) and the
parameters inside its flat buffers (for the per-module tables). Reads Megatron's objects only;
the Megatron plugin (__init__.py) calls these from its patches."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..context import PluginContext


def declare_layout(ps: ModuleType, layout, order: str) -> None:
    """Declare Megatron's groups to the rank grouping (distributed/layout.py): pipeline stages
    hold different layers; tensor, context, data and expert parallelism split evenly (Megatron
    checks that they divide), so their coordinates hold the same sizes. `ps` is
    megatron.core.parallel_state after initialize_model_parallel, `order` its rank order."""
    from ...distributed import layout as L

    tp = ps.get_tensor_model_parallel_world_size()
    pp = ps.get_pipeline_model_parallel_world_size()
    cp = ps.get_context_parallel_world_size()
    ep = ps.get_expert_model_parallel_world_size()
    etp = ps.get_expert_tensor_parallel_world_size()
    world = layout.world_size
    dense = ps.RankGenerator(tp=tp, ep=1, dp=world // (tp * pp * cp), pp=pp, cp=cp, order=order)
    expert = ps.RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1,
                              order=order)
    for name, generator, size in (("pp", dense, pp), ("tp", dense, tp), ("cp", dense, cp),
                                  ("dp", dense, world // (tp * pp * cp)), ("ep", expert, ep)):
        if size > 1:
            layout.declare(name, generator.get_ranks(name),
                           L.PIPELINE if name == "pp" else L.SYMMETRIC)


def share_by_parameter(tracer: PluginContext, buffer, data) -> None:
    """A flat buffer holds every parameter's data (or gradient): in the module tables each
    module gets the slices of its own parameters."""
    rid = tracer.ledger.storage_rid(data.untyped_storage())
    index = getattr(buffer, "param_index_map", None)
    if rid is None or not index:
        return
    owners = tracer.modules.param_owner
    size = data.element_size()
    parts: dict[int, int] = {}
    for param, (start, end, _bucket) in index.items():
        module = owners.get(id(param), -1)
        if module >= 0:
            parts[module] = parts.get(module, 0) + (end - start) * size
    tracer.ledger.share(rid, sorted(parts.items()))
