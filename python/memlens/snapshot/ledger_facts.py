"""What the snapshot reads of a trace's ledger: the seam between the engine, which writes the
ledger (engine/ledger.py's Ledger and Record are these), and the snapshot room, which is handed
one and never imports the engine."""

from __future__ import annotations

from typing import Any, Iterator, Protocol


class AllocationFacts(Protocol):
    """One allocation from alloc to free (engine/ledger.py's Record)."""

    nbytes: int  # requested bytes
    size: int  # bytes as the target allocator rounds them
    device: str
    dtype: Any
    shape: Any
    category: int
    module: int  # module index or -1
    phase: int
    op: int  # op-name index
    stack: int  # stack id
    alloc_seq: int
    free_seq: int  # -1 while alive
    stream: int
    backward: bool
    sub: int  # subcategory (categories.SUB_*), 0: none


class LedgerFacts(Protocol):
    records: list[AllocationFacts]
    events: list[int]  # rid for an alloc, ~rid for a free
    ops: list[str]
    allocators: dict[str, Any]  # device -> its allocator model, or None
    # device -> [(seq, reserved, allocated, segments, {stream: reserved})] after each change
    reserved: dict[str, list[tuple[int, int, int, int, dict[int, int]]]]
    stream_events: list[tuple]
    stream_names: dict[int, tuple[str, str | None]]

    ooms: list[tuple[int, Any]]  # (record id, the allocator's OomInfo) of refused allocations
    graph_pools: dict[int, dict[str, Any]]  # CUDA graph pool id -> its name, graphs, replays

    def allocator_events(self, device: str, n_events: int) -> Any:
        """The first `n_events` alloc/free/stream events of `device`, as the allocator model
        replays them."""

    def module_bytes(self, rid: int) -> Iterator[tuple[int, int]]:
        """(module, bytes) pairs of an allocation."""
