"""One expandable segment: a virtual range backed page by page (ExpandableSegment in
c10/cuda/CUDACachingAllocator.cpp).

With expandable_segments:True the allocator reserves, per pool and stream, virtual address space
for 1 1/8 of the device and maps physical pages into it only as blocks need them: 2 MiB pages
for the small pool, `large_segment_size` (20 MiB) pages for the large pool. Reserved memory is
the mapped pages; releasing the cache unmaps the pages no block touches. How a pool's blocks
grow into and shrink out of its segments is expandable_pool.py.
"""

from __future__ import annotations


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
