"""How an expandable pool grows and shrinks (find_expandable_block, map_block, unmap_block in
c10/cuda/CUDACachingAllocator.cpp): its blocks mapped onto and unmapped from the pages of its
ExpandableSegments (expandable.py), through what the allocator model offers as a SegmentHost,
never its private fields."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .blocks import Block, BlockPool
from .expandable import ExpandableSegment
from .sizes import SMALL_BUFFER

if TYPE_CHECKING:
    from .segment_host import SegmentHost


def allocate_block(model: SegmentHost, pool: BlockPool, stream: int,
                   size: int) -> Block | None:
    """try_allocate_expandable_block: map just enough pages at the lowest address that fits."""
    candidate = _find_space(model, pool, stream, size)
    if not candidate.mapped and not _map_block(model, candidate, min(candidate.size, size)):
        return None
    while candidate.size < size:  # free -> unmapped: map the rest; the free part merges in
        following = candidate.next
        if not _map_block(model, following, min(size - candidate.size, following.size)):
            return None
        candidate = following
    pool.remove(candidate)
    return candidate


def _find_space(model: SegmentHost, pool: BlockPool, stream: int,
                size: int) -> Block:
    """find_expandable_block: the lowest address where free and unmapped space together hold
    `size`, else the unmapped range of a new segment."""
    for candidate in pool.unmapped(stream):
        if candidate.prev is not None and not candidate.prev.allocated and \
                not candidate.prev.event_count:
            candidate = candidate.prev  # free space just before the unmapped range counts
        room, block = 0, candidate
        while room < size and block is not None and not block.allocated and \
                not block.event_count:
            room += block.size
            block = block.next
        if room >= size:
            return candidate
    page = SMALL_BUFFER if pool.is_small else model.config.large_segment_size
    span = ExpandableSegment.address_space(model.capacity, page)  # 9/8 of the card
    segment = ExpandableSegment(model.reserve_addresses(span, page), page, model.capacity,
                                stream, pool.is_small)
    model.expandable_segments.append(segment)
    candidate = Block(segment.size, segment.base, stream, pool, segment, mapped=False)
    pool.insert_unmapped(candidate)
    return candidate


def _map_block(model: SegmentHost, block: Block, size: int) -> bool:
    """map_block: back the start of an unmapped range; the rest stays unmapped."""
    mapped = block.segment.map(block.addr, size, model.device_total - model.reserved_bytes)
    if mapped == 0:
        return False  # cuMemCreate: out of memory
    pool = block.pool
    pool.remove_unmapped(block)
    block.mapped = True
    if mapped < block.size:
        rest = Block(block.size - mapped, block.addr + mapped, block.stream, pool,
                     block.segment, mapped=False)
        rest.splice(block, block.next)
        pool.insert_unmapped(rest)
        block.size = mapped
    model.merge_neighbours(block)
    pool.insert(block)
    model.pages_mapped(block, mapped)
    return True


def unmap_block(model: SegmentHost, block: Block) -> None:
    """Give back the whole pages inside a free block; its ragged edges stay free."""
    start, size = block.segment.unmap(block.addr, block.size)
    if size == 0:
        return
    pool = block.pool
    pool.remove(block)
    before = start - block.addr
    if before > 0:
        head = Block(before, block.addr, block.stream, pool, block.segment)
        head.splice(block.prev, block)
        pool.insert(head)
    after = block.size - before - size
    if after > 0:
        tail = Block(after, start + size, block.stream, pool, block.segment)
        tail.splice(block, block.next)
        pool.insert(tail)
    block.addr, block.size, block.mapped = start, size, False
    model.merge_neighbours(block)
    pool.insert_unmapped(block)
    model.pages_unmapped(block, start, size)
