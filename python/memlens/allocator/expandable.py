"""One expandable segment: a virtual range backed page by page (ExpandableSegment in
c10/cuda/CUDACachingAllocator.cpp).

With expandable_segments:True the allocator reserves, per pool and stream, virtual address space
for 1 1/8 of the device and maps physical pages into it only as blocks need them: 2 MiB pages
for the small pool, `large_segment_size` (20 MiB) pages for the large pool. Reserved memory is
the mapped pages; releasing the cache unmaps the pages no block touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .blocks import Block, BlockPool
from .sizes import SMALL_BUFFER

if TYPE_CHECKING:
    from .caching import CachingAllocatorModel


class ExpandableSegment:
    def __init__(self, base: int, page_size: int, device_total: int, stream: int,
                 is_small: bool) -> None:
        self.base = base
        self.page_size = page_size
        self.stream = stream
        self.is_small = is_small
        self.size = self.address_space(device_total, page_size)
        self.max_pages = self.size // page_size
        self._mapped = bytearray(self.max_pages)
        self.mapped_bytes = 0
        self.runs = 0  # contiguous mapped ranges: what a memory snapshot lists as segments

    @staticmethod
    def address_space(device_total: int, page_size: int) -> int:
        """numSegments(total + total / 8) pages: the range may run past the device's memory
        so pages unmapped early in it can be mapped again at its end."""
        return -(-(device_total + device_total // 8) // page_size) * page_size

    def map(self, addr: int, nbytes: int, bytes_available: int) -> int:
        """Back [addr, addr + nbytes) with whole pages; answers the bytes mapped, 0 on OOM.

        `addr` is page aligned; the range is rounded up to whole pages. Pages are created one by
        one and the whole call is undone if any fails, so a failure maps nothing.
        """
        begin = (addr - self.base) // self.page_size
        end = -(-(addr + nbytes - self.base) // self.page_size)
        if begin == end:
            return 0
        assert not any(self._mapped[begin:end]), "mapping a page twice"
        size = (end - begin) * self.page_size
        if size > bytes_available:
            return 0
        self._mapped[begin:end] = b"\x01" * (end - begin)
        self.runs += 1 - self._is_mapped(begin - 1) - self._is_mapped(end)
        self.mapped_bytes += size
        return size

    def unmap(self, addr: int, nbytes: int) -> tuple[int, int]:
        """Release the pages lying wholly inside [addr, addr + nbytes); answers (start, bytes)."""
        begin = -(-(addr - self.base) // self.page_size)
        end = (addr + nbytes - self.base) // self.page_size
        if begin >= end:
            return addr, 0
        self._mapped[begin:end] = bytes(end - begin)
        self.runs += self._is_mapped(begin - 1) + self._is_mapped(end) - 1
        size = (end - begin) * self.page_size
        self.mapped_bytes -= size
        return self.base + begin * self.page_size, size

    def _is_mapped(self, page: int) -> int:
        return 1 if 0 <= page < self.max_pages and self._mapped[page] else 0


# -- how an expandable pool grows and shrinks (through the model's methods, never its _fields) --
def allocate_block(model: CachingAllocatorModel, pool: BlockPool, stream: int,
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


def _find_space(model: CachingAllocatorModel, pool: BlockPool, stream: int,
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


def _map_block(model: CachingAllocatorModel, block: Block, size: int) -> bool:
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


def unmap_block(model: CachingAllocatorModel, block: Block) -> None:
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
