"""The model's segments and blocks in the shape of torch.cuda.memory._snapshot()['segments']
(DeviceCachingAllocator::snapshot and torch/csrc/cuda/memory_snapshot.cpp), which memory_viz
and torch.cuda._memory_viz.segsum read."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .blocks import Block
    from .caching import CachingAllocatorModel


def memory_snapshot(model: CachingAllocatorModel) -> dict:
    """{"segments": [...], "device_traces": [[...]]}; traces only if record_history was on.

    Like PyTorch, an expandable segment is listed once per contiguous mapped range. Allocated
    blocks carry the caller's `block_id` (not a PyTorch field) so they can be tied to tensors.
    """
    heads: list[Block] = []
    for block in _all_blocks(model):
        if block.prev is None or not block.prev.mapped:
            heads.append(block)
    segments = [_segment(model.device_index, head) for head in heads]
    segments.sort(key=lambda seg: seg["address"])
    return {"segments": segments, "device_traces": [list(model.history or [])]}


def _all_blocks(model: CachingAllocatorModel):
    for pool in (model.small_pool, model.large_pool):
        yield from pool.blocks()
    for private in model.graphs.pools.values():  # CUDA graphs' pools
        yield from private.small.blocks()
        yield from private.large.blocks()
    yield from model.active.values()
    yield from model.events.pending()
    yield from model.deferred_blocks()


def _state(block: Block) -> str:
    if block.allocated:
        return "active_allocated"
    # freed by the program, still waiting for the events of the streams that used it
    return "active_pending_free" if block.event_count else "inactive"


def _segment(device: int, head: Block) -> dict:
    blocks = []
    total = allocated = requested = 0
    block = head
    while block is not None and block.mapped:
        blocks.append({"address": block.addr, "size": block.size,
                       "requested_size": block.requested if block.allocated else 0,
                       "state": _state(block),
                       "block_id": block.block_id, "frames": []})
        total += block.size
        if block.allocated:
            allocated += block.size
            requested += block.requested
        block = block.next
    return {"device": device, "address": head.addr, "total_size": total,
            "allocated_size": allocated, "active_size": allocated, "requested_size": requested,
            "stream": head.stream, "segment_type": "small" if head.pool.is_small else "large",
            "segment_pool_id": (head.pool.owner, 0), "is_expandable": head.segment is not None,
            "frames": [], "blocks": blocks}
