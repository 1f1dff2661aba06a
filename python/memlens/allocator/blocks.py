"""Blocks and the pools of free blocks the allocator searches.

A segment is a chain of Blocks linked by prev/next in address order; a free Block sits in its
pool, which PyTorch keeps as a std::set ordered by (stream, size, address) (BlockComparatorSize)
so that `lower_bound` is a best fit that prefers the lowest address among equal sizes. Here each
stream has its own sorted list of integer keys `size << 64 | address` (bisect gives the same
order), and unmapped ranges of expandable segments are kept per stream in address order
(BlockComparatorAddress).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Iterator

from .stats import LARGE, SMALL

if TYPE_CHECKING:
    from .expandable import ExpandableSegment

_ADDR_BITS = 64
_ADDR_MASK = (1 << _ADDR_BITS) - 1


class Block:
    __slots__ = ("size", "addr", "stream", "pool", "allocated", "mapped", "prev", "next",
                 "requested", "segment", "gc_count_base", "block_id", "stream_uses",
                 "event_count")

    def __init__(self, size: int, addr: int, stream: int, pool: "BlockPool",
                 segment: "ExpandableSegment | None" = None, mapped: bool = True) -> None:
        self.size = size
        self.addr = addr
        self.stream = stream
        self.pool = pool
        self.allocated = False
        self.mapped = mapped  # False only for not-yet-backed ranges of expandable segments
        self.prev: Block | None = None
        self.next: Block | None = None
        self.requested = 0  # bytes the caller asked for (requested_size)
        self.segment = segment  # the ExpandableSegment holding this block, if any
        self.gc_count_base = 0  # pool.get_free_blocks_call_count when it was cached
        self.block_id: int | None = None
        self.stream_uses: set[int] | None = None  # other streams that used it (record_stream)
        self.event_count = 0  # outstanding end-of-use events (stream_events.py)

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: "Block | None", after: "Block | None") -> None:
        """Insert self between two neighbours (either may be None)."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else ("free" if self.mapped else "unmapped")
        return f"Block({state} {self.size} B @ {self.addr:#x} stream {self.stream})"


class BlockPool:
    """Free (cached) blocks of one size class: all small or all large, every stream; of the
    default pools or of one CUDA graph's private pool (graph_pools.py)."""

    def __init__(self, is_small: bool, owner: int = 0) -> None:
        self.is_small = is_small
        self.owner = owner  # 0: the allocator's own pools; else a CUDA graph's private pool
        self.stat_type = SMALL if is_small else LARGE  # which memory_stats() pool it counts in
        self._keys: dict[int, list[int]] = {}  # stream -> sorted size<<64|addr
        self._by_addr: dict[int, Block] = {}
        self._unmapped: dict[int, list[int]] = {}  # stream -> sorted addresses
        self._unmapped_by_addr: dict[int, Block] = {}
        self.get_free_blocks_call_count = 0  # the GC's clock (only ticks when GC is enabled)

    # -- free, mapped blocks ------------------------------------------------------------
    def insert(self, block: Block) -> None:
        """BlockPool::insert_into_blocks: cache a block and start its GC age."""
        block.gc_count_base = self.get_free_blocks_call_count
        keys = self._keys.get(block.stream)
        if keys is None:
            keys = self._keys[block.stream] = []
        insort(keys, block.size << _ADDR_BITS | block.addr)
        self._by_addr[block.addr] = block

    def remove(self, block: Block) -> None:
        del self._by_addr[block.addr]  # first: a KeyError here means it was not cached
        keys = self._keys[block.stream]
        del keys[bisect_left(keys, block.size << _ADDR_BITS | block.addr)]

    def best_fit(self, stream: int, size: int) -> tuple[int, Block | None]:
        """lower_bound: the smallest block of `stream` with at least `size` bytes (the lowest
        address among equals) and its position, or (position past the end, None)."""
        keys = self._keys.get(stream)
        if not keys:
            return 0, None
        position = bisect_left(keys, size << _ADDR_BITS)
        if position == len(keys):
            return position, None
        return position, self._by_addr[keys[position] & _ADDR_MASK]

    def at(self, stream: int, position: int) -> Block | None:
        keys = self._keys.get(stream)
        if not keys or position >= len(keys) or position < 0:
            return None
        return self._by_addr[keys[position] & _ADDR_MASK]

    def blocks(self) -> Iterator[Block]:
        """Every free block in PyTorch's set order: stream, then size, then address."""
        for stream in sorted(self._keys):
            for key in list(self._keys[stream]):
                yield self._by_addr[key & _ADDR_MASK]

    # -- unmapped ranges of expandable segments -----------------------------------------
    def insert_unmapped(self, block: Block) -> None:
        insort(self._unmapped.setdefault(block.stream, []), block.addr)
        self._unmapped_by_addr[block.addr] = block

    def remove_unmapped(self, block: Block) -> None:
        del self._unmapped_by_addr[block.addr]
        addrs = self._unmapped[block.stream]
        del addrs[bisect_left(addrs, block.addr)]

    def unmapped(self, stream: int) -> list[Block]:
        """This stream's unmapped ranges, lowest address first."""
        return [self._unmapped_by_addr[a] for a in self._unmapped.get(stream, ())]
