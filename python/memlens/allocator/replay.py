"""Replay one device's allocation events through the allocator model.

The engine's ledger gives, per device and in order, `(kind, block_id, nbytes, stream)` with kind
"alloc" or "free", and between them the streams' own events: `("record_stream", block_id, 0,
stream)` and `("wait", waiter, marker, stream)` (waiter a stream or -1 for the host, marker the
model's tick the wait covers; see stream_events.py), and private pools' (CUDA graph captures,
MemPools): `("pool_create", pool, 0, 0)`, `("pool_begin", pool, 0, stream)` (stream -1: every
stream), `("pool_join", pool, 0, stream)`, `("pool_end", pool, 0, 0)`, `("pool_release",
pool, 0, 0)` (graph_pools.py) and `("empty_cache", pool, 0, 0)` (pool 0: every pool). Only
allocs and frees count as events. Replaying them answers what torch.cuda.memory_reserved()
would have peaked at,
how much of that was cached but unused (fragmentation), and which event would have run out of
memory. An allocation that fails is left out of the state (PyTorch would have raised at that
point); its later free is ignored, so numbers after the first OOM describe the rest of the
step without it.

Speed, measured on this project's CPU machine (Python 3.11, 2 shared cores busy with other jobs,
load 2.5-7, so the spread is wide): the 1,000,000-event stream of
tests/allocator/test_allocator_replay.py::training_like(500_000) (allocations of 64 B to ~384 MiB, most
freed at once, the rest unwound stack-wise) replays in 4.1-6.8 s of CPU time with the default
config and 3.2-4.6 s with expandable_segments:True. For scale, a bare
`for i in range(10**7): x += i` took 1.15-1.3 s on that machine at the same time (about a third
of that on a typical laptop), so expect roughly 1.5-2.5 s per million events on an idle one.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Iterable

from .caching import CachingAllocatorModel
from .config import AllocatorConfig, parse_alloc_conf
from .oom import OomInfo
from .stats import ALLOCATED_BYTES


@dataclass(frozen=True)
class ReplayResult:
    events: int
    peak_allocated: int
    peak_reserved: int
    peak_reserved_event: int | None  # first event after which reserved stood at its peak
    allocated_at_peak_reserved: int
    fragmentation_bytes: int  # reserved minus allocated at that moment: cached, unused
    fragmentation_ratio: float  # the same, as a share of reserved
    segments_at_peak_reserved: int
    first_oom_event: int | None
    first_oom_message: str | None
    first_oom: OomInfo | None  # sizes and memory at that failure
    num_ooms: int
    num_alloc_retries: int
    # Down-sampled timeline: each point is the event with the most reserved memory in its
    # stretch of events, so peaks survive the sampling.
    series_event: tuple[int, ...] = ()
    series_reserved: tuple[int, ...] = ()
    series_allocated: tuple[int, ...] = ()
    final_stats: dict[str, int] = field(default_factory=dict, repr=False)


def replay(events: Iterable[tuple[str, int, int, int]],
           config: AllocatorConfig | str | None = None,
           device_total_bytes: int = 80 * 2**30, *, capacity_bytes: int | None = None,
           memory_fraction: float | None = None, device_index: int = 0,
           max_points: int = 2000) -> ReplayResult:
    """Run `events` through a fresh CachingAllocatorModel (see its parameters). `config` may
    be a parsed AllocatorConfig or a PYTORCH_CUDA_ALLOC_CONF string."""
    if isinstance(config, str) or config is None:
        config = parse_alloc_conf(config)
    model = CachingAllocatorModel(config, device_total_bytes, device_index=device_index,
                                  capacity_bytes=capacity_bytes,
                                  memory_fraction=memory_fraction)
    malloc, free = model.malloc, model.free
    stats_now = model.stats.current  # read allocated bytes without a property call per event
    reserved_at, allocated_at = array("q"), array("q")
    failed: set[int] = set()
    peak_reserved, peak_event, allocated_at_peak, segments_at_peak = 0, None, 0, 0
    first_oom_event, first_oom = None, None
    index = -1
    for kind, block_id, nbytes, stream in events:
        if kind == "record_stream":
            model.record_stream(block_id, stream)
            continue
        if kind == "wait":  # ("wait", waiter, marker, stream)
            model.stream_waited(block_id, stream, nbytes)
            continue
        if kind in POOL_EVENTS:
            pool_event(model, kind, block_id, stream)
            continue
        index += 1
        if kind == "alloc":
            result = malloc(block_id, nbytes, stream)
            if not result.ok:
                failed.add(block_id)
                if first_oom_event is None:
                    first_oom_event, first_oom = index, result.oom
        elif kind == "free":
            if block_id in failed:
                failed.discard(block_id)
            else:
                free(block_id)
        else:
            raise ValueError(f"event {index}: kind must be 'alloc' or 'free', not {kind!r}")
        reserved = model.reserved_bytes
        allocated = stats_now[ALLOCATED_BYTES]
        reserved_at.append(reserved)
        allocated_at.append(allocated)
        if reserved > peak_reserved:
            peak_reserved, peak_event = reserved, index
            allocated_at_peak, segments_at_peak = allocated, model.segment_count()
    points = _downsample(reserved_at, max_points)
    stats = model.memory_stats()
    waste = peak_reserved - allocated_at_peak
    return ReplayResult(
        events=index + 1,
        peak_allocated=stats["allocated_bytes.all.peak"],
        peak_reserved=peak_reserved,
        peak_reserved_event=peak_event,
        allocated_at_peak_reserved=allocated_at_peak,
        fragmentation_bytes=waste,
        fragmentation_ratio=waste / peak_reserved if peak_reserved else 0.0,
        segments_at_peak_reserved=segments_at_peak,
        first_oom_event=first_oom_event,
        first_oom_message=first_oom.message if first_oom else None,
        first_oom=first_oom,
        num_ooms=stats["num_ooms"],
        num_alloc_retries=stats["num_alloc_retries"],
        series_event=tuple(points),
        series_reserved=tuple(reserved_at[i] for i in points),
        series_allocated=tuple(allocated_at[i] for i in points),
        final_stats=stats,
    )


POOL_EVENTS = frozenset({"pool_create", "pool_begin", "pool_join", "pool_end", "pool_release",
                         "empty_cache"})


def pool_event(model: CachingAllocatorModel, kind: str, pool: int, stream: int) -> None:
    """A MemPool made, a capture's (or use_mem_pool's) start or end, a pool's release, or
    torch.cuda.empty_cache(), on `model`."""
    if kind == "pool_create":
        model.create_pool(pool)
    elif kind == "pool_begin":
        model.begin_allocate_to_pool(pool, {stream})
    elif kind == "pool_join":
        model.join_capture(pool, stream)
    elif kind == "pool_end":
        model.end_allocate_to_pool(pool)
    elif kind == "pool_release":
        model.release_pool(pool)
    else:
        model.empty_cache(pool)  # 0: every pool


def _downsample(values: array, max_points: int) -> list[int]:
    """Indices of the largest value in each of at most `max_points` equal stretches."""
    n = len(values)
    if n <= max_points:
        return list(range(n))
    stretch = -(-n // max_points)
    points = []
    for start in range(0, n, stretch):
        chunk = values[start:start + stretch]
        points.append(start + chunk.index(max(chunk)))
    return points
