"""torch.cuda's memory queries answered from the trace: the ledger's allocator model of each
simulated GPU (its block sizes are the ledger's, so `memory_allocated()` is the estimate). It
also passes the streams' waits on to the ledger (streams.py's StreamListener), and CUDA graph
captures and MemPools (graphs.py's GraphListener)."""

from __future__ import annotations


class LedgerMemory:
    """A `simulate.MemorySource` over the ledger's per-device caching-allocator models."""

    def __init__(self, ledger) -> None:
        self.ledger = ledger

    def _stats(self, device_index: int) -> dict[str, int]:
        model = self.ledger.allocator(f"cuda:{device_index}")
        return model.memory_stats() if model is not None else {}

    def allocated(self, device_index: int) -> int:
        return self._stats(device_index).get("allocated_bytes.all.current", 0)

    def max_allocated(self, device_index: int) -> int:
        return self._stats(device_index).get("allocated_bytes.all.peak", 0)

    def reserved(self, device_index: int) -> int:
        return self._stats(device_index).get("reserved_bytes.all.current", 0)

    def max_reserved(self, device_index: int) -> int:
        return self._stats(device_index).get("reserved_bytes.all.peak", 0)

    def reset_peak(self, device_index: int) -> None:
        model = self.ledger.allocator(f"cuda:{device_index}")
        if model is not None:
            model.stats.reset_peaks()

    def empty_cache(self, device_index: int) -> None:
        self.ledger.empty_cache(f"cuda:{device_index}")

    # -- streams.StreamListener --------------------------------------------------------------
    def stream_marker(self, device_index: int) -> int:
        return self.ledger.stream_marker(f"cuda:{device_index}")

    def stream_named(self, stream: int, name: str, place: str | None) -> None:
        self.ledger.stream_named(stream, name, place)

    def stream_waited(self, device_index: int, waiter: int, stream: int,
                      marker: int | None) -> None:
        self.ledger.stream_waited(f"cuda:{device_index}", waiter, stream, marker)

    # -- graphs.GraphListener ----------------------------------------------------------------
    def graph_pool_event(self, device_index: int, kind: str, pool: int, stream: int) -> None:
        self.ledger.pool_event(f"cuda:{device_index}", kind, pool, stream)

    def graph_captured(self, pool: int, place: str | None) -> None:
        info = self.ledger.graph_pools.setdefault(
            pool, {"name": f"graph pool {pool}", "graphs": [], "replays": 0})
        info["graphs"].append(place or "?")

    def graph_pool_named(self, pool: int, name: str) -> None:
        self.ledger.graph_pools.setdefault(
            pool, {"name": name, "graphs": [], "replays": 0})["name"] = name

    def pool_segments(self, device_index: int, pool: int) -> list[dict]:
        from ..allocator.snapshot import memory_snapshot

        model = self.ledger.allocator(f"cuda:{device_index}")
        if model is None:
            return []
        return [s for s in memory_snapshot(model)["segments"]
                if s["segment_pool_id"] == (pool, 0)]

    def graph_replayed(self, pool: int) -> None:
        info = self.ledger.graph_pools.get(pool)  # None: captured before this trace began
        if info is not None:
            info["replays"] += 1
