"""What the segment helpers (expandable_pool.py, release.py) may use of the allocator model:
its configuration, its books of reserved memory and the operations that keep them. The
CachingAllocatorModel is one; the helpers never import it, so the allocator's modules import one
way (caching -> helpers -> blocks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .blocks import Block, BlockPool
    from .config import AllocatorConfig
    from .expandable import ExpandableSegment


class SegmentHost(Protocol):
    config: AllocatorConfig
    capacity: int  # the card's total memory
    device_total: int  # what cudaMalloc may take in all
    reserved_bytes: int
    allowed_max: int | None  # the memory fraction's limit, if below the card
    large_pool: BlockPool
    expandable_segments: list[ExpandableSegment]

    @property
    def max_split(self) -> int: ...

    def release_block(self, block: Block) -> None:
        """Give a free, unsplit cached segment back to the driver."""

    def reserve_addresses(self, size: int, alignment: int) -> int:
        """A fresh range of fake device addresses."""

    def merge_neighbours(self, block: Block) -> None:
        """Merge a block with its free neighbours."""

    def pages_mapped(self, block: Block, nbytes: int) -> None:
        """Book `nbytes` of pages mapped at `block` as reserved."""

    def pages_unmapped(self, block: Block, start: int, nbytes: int) -> None:
        """Book `nbytes` of pages unmapped from `start` as no longer reserved."""
