"""Giving cached segments back to the driver before cudaMalloc is tried again
(release_available_cached_blocks and garbage_collect_cached_blocks in
c10/cuda/CUDACachingAllocator.cpp), through what the model offers as a SegmentHost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import SIZE_MAX

if TYPE_CHECKING:
    from .blocks import BlockPool
    from .segment_host import SegmentHost


def release_available_cached_blocks(model: SegmentHost, pool: BlockPool, stream: int,
                                    size: int) -> bool:
    """Free oversize cached segments until one request's worth is back (only with
    max_split_size_mb set): the best-fitting one, else the largest ones downwards."""
    if model.max_split == SIZE_MAX:
        return False
    target = max(size, model.max_split)
    position, block = pool.best_fit(stream, target)
    if block is not None and block.segment is None:
        model.release_block(block)
        return True
    released = 0
    position -= 1
    while released < target and position >= 0:
        block = pool.at(stream, position)
        if block.size < model.max_split:
            break
        if block.segment is None:
            released += block.size
            model.release_block(block)
        position -= 1
    return released >= target


def garbage_collect_cached_blocks(model: SegmentHost) -> None:
    """When reserved memory passes the threshold, release
    unsplit cached large segments whose age (cache lookups since they were cached) is at
    least the average, repeatedly, until enough is back."""
    threshold = int(model.config.garbage_collection_threshold * model.allowed_max)
    if model.reserved_bytes <= threshold:
        return
    target = model.reserved_bytes - threshold
    pool = model.large_pool
    clock = pool.get_free_blocks_call_count
    ages = [clock - b.gc_count_base for b in pool.blocks() if not b.is_split()]
    total_age, freeable = sum(ages), len(ages)
    reclaimed, block_freed = 0, True
    while reclaimed < target and block_freed and freeable > 0:
        age_threshold = total_age / freeable
        block_freed = False
        for block in list(pool.blocks()):
            age = clock - block.gc_count_base
            if not block.is_split() and block.segment is None and age >= age_threshold:
                block_freed = True
                reclaimed += block.size
                total_age -= age
                freeable -= 1
                model.release_block(block)
