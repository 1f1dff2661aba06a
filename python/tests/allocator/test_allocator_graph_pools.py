"""CUDA graphs' private pools in the caching allocator model, on sequences worked out by hand
from c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.13):
- beginAllocateToPool creates the pool (use_count 1) or adds a user (create_or_incref_pool);
  get_pool routes the allocations of the capturing stream to the pool's own small/large
  BlockPools; endAllocateToPool stops that;
- a block freed in the pool goes back to the pool (free_block: block->pool), which no
  allocation outside a capture searches;
- releasePool drops a user; at 0 the pool is freeable: release_cached_blocks (empty_cache)
  cudaFrees its unsplit cached segments and erases the pool once none is left;
- release_cached_blocks leaves the default pools alone while a capture is under way.
Sizes: 3 MiB is a large-pool request below 10 MiB: a miss cudaMallocs a 20 MiB segment and
splits off the 17 MiB rest; 1,000 B is a small request, rounded to 1,024 B, carved from a
2 MiB small segment; 12 MiB is its own 12 MiB segment, never split."""

from memlens.allocator import replay
from memlens.allocator.caching import CachingAllocatorModel
from memlens.allocator.config import parse_alloc_conf
from memlens.allocator.snapshot import memory_snapshot
from memlens.allocator.stream_events import HOST

MiB = 1 << 20
S, T = 1, 2  # the capturing stream, another stream
POOL = 1


def make() -> CachingAllocatorModel:
    return CachingAllocatorModel(parse_alloc_conf(""), 80 << 30)


def test_a_capture_allocates_from_its_pool_which_outlives_the_capture():
    m = make()
    m.begin_allocate_to_pool(POOL, {S})
    first = m.malloc(1, 3 * MiB, S)  # the pool's large pool: a 20 MiB segment of its own
    m.free(1)  # back to the pool (merged: one free 20 MiB block there)
    again = m.malloc(2, 3 * MiB, S)  # still capturing: the pool's cached block serves it
    assert again.address == first.address
    m.malloc(3, 1000, S)  # small: a 2 MiB segment in the pool's small pool
    assert (m.reserved_bytes, m.reserved_by_pool) == (22 * MiB, {POOL: 22 * MiB})
    m.end_allocate_to_pool(POOL)
    m.free(2)  # after the capture a pool block still goes back to the pool
    outside = m.malloc(4, 3 * MiB, S)  # the default pool: the pool's free 20 MiB is not seen
    assert outside.address != first.address
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (42 * MiB, 22 * MiB)
    m.free(4)
    m.empty_cache()  # the default pool's 20 MiB goes; the live graph's pool stays whole
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (22 * MiB, 22 * MiB)
    assert sorted((s["segment_pool_id"], s["total_size"])
                  for s in memory_snapshot(m)["segments"]) == [((POOL, 0), 2 * MiB),
                                                              ((POOL, 0), 20 * MiB)]
    m.release_pool(POOL)  # the graph is destroyed: freeable, nothing released yet
    assert m.reserved_bytes == 22 * MiB
    m.empty_cache()  # the free 20 MiB segment goes; block 3 (a static output) keeps its 2 MiB
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (2 * MiB, 2 * MiB)
    assert POOL in m.graphs.pools
    m.free(3)
    m.empty_cache()  # the last segment goes and the pool with it
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (0, 0)
    assert POOL not in m.graphs.pools


def test_the_same_events_replayed_reach_the_same_peak():
    events = [("pool_begin", POOL, 0, S), ("alloc", 1, 3 * MiB, S), ("free", 1, 0, S),
              ("alloc", 2, 3 * MiB, S), ("alloc", 3, 1000, S), ("pool_end", POOL, 0, 0),
              ("free", 2, 0, S), ("alloc", 4, 3 * MiB, S), ("free", 4, 0, S),
              ("pool_release", POOL, 0, 0), ("empty_cache", 0, 0, 0), ("free", 3, 0, S),
              ("empty_cache", 0, 0, 0)]
    result = replay(events)
    # 20 + 2 MiB in the pool, then 20 MiB of the default pool beside them; all released.
    assert (result.peak_reserved, result.final_stats["reserved_bytes.all.current"]) == \
        (42 * MiB, 0)
    # Without the pool events the 3 MiB after the capture reuses the cached 20 MiB block.
    plain = [e for e in events if e[0] in ("alloc", "free")]
    assert replay(plain).peak_reserved == 22 * MiB


def test_two_graphs_sharing_a_pool_share_its_segments():
    m = make()
    m.begin_allocate_to_pool(POOL, {S})
    first = m.malloc(1, 3 * MiB, S)  # graph 1's output: 20 MiB segment, 17 MiB free rest
    m.end_allocate_to_pool(POOL)
    m.begin_allocate_to_pool(POOL, {S})  # pool=g1.pool(): use_count 2
    second = m.malloc(2, 3 * MiB, S)  # carved from the 17 MiB rest: no new segment
    m.end_allocate_to_pool(POOL)
    assert second.address == first.address + 3 * MiB
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (20 * MiB, 20 * MiB)
    m.free(1)
    m.free(2)
    m.release_pool(POOL)  # graph 1 destroyed: graph 2 still uses the pool
    m.empty_cache()
    assert m.reserved_bytes == 20 * MiB
    m.release_pool(POOL)  # graph 2 destroyed too
    m.empty_cache()
    assert (m.reserved_bytes, POOL in m.graphs.pools) == (0, False)


def test_other_streams_allocate_outside_the_pool_during_a_capture():
    m = make()
    m.begin_allocate_to_pool(POOL, {S})
    m.malloc(1, 3 * MiB, T)  # the filter accepts only the capturing stream: default pool
    m.malloc(2, 3 * MiB, S)
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (40 * MiB, 20 * MiB)


def test_empty_cache_during_a_capture_keeps_the_default_pools():
    m = make()
    m.malloc(1, 3 * MiB, 0)
    m.free(1)  # a cached 20 MiB segment of the default pool
    m.begin_allocate_to_pool(POOL, {S})
    m.empty_cache()  # captures_underway: release_cached_blocks skips the default pools
    assert m.reserved_bytes == 20 * MiB
    m.end_allocate_to_pool(POOL)
    m.empty_cache()
    assert m.reserved_bytes == 0


def test_a_recorded_block_freed_during_a_capture_waits_for_the_capture_to_end():
    m = make()
    m.begin_allocate_to_pool(POOL, {S})
    first = m.malloc(1, 12 * MiB, S)  # a 12 MiB pool segment
    m.record_stream(1, T)
    m.free(1)  # needs_events_deferred_until_no_capture: held out of the pool, no event yet
    m.stream_waited(HOST, T)  # no event recorded yet: nothing completes
    second = m.malloc(2, 12 * MiB, S)  # so a second 12 MiB segment
    assert second.address != first.address and m.reserved_by_pool[POOL] == 24 * MiB
    m.end_allocate_to_pool(POOL)  # the event on T is recorded now
    m.free(2)
    m.stream_waited(HOST, T)  # the host waits for T after the event: block 1 comes back
    third = m.malloc(3, 12 * MiB, S)  # (outside the capture: the default pool, a new segment)
    assert m.reserved_by_pool[POOL] == 24 * MiB and third.address not in (first.address,
                                                                           second.address)
    m.release_pool(POOL)
    m.empty_cache()  # both pool segments are free again: released
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (12 * MiB, 0)


def test_expandable_segments_keep_a_range_per_pool():
    # expandable_segments:True maps 20 MiB pages of large ranges, one range per pool and stream:
    # the capture's 3 MiB maps one page in the pool's range; after the capture 3 MiB more maps
    # a page in a range of the default pool (the pool's free 17 MiB is not searched).
    m = CachingAllocatorModel(parse_alloc_conf("expandable_segments:True"), 80 << 30)
    m.begin_allocate_to_pool(POOL, {S})
    m.malloc(1, 3 * MiB, S)
    m.end_allocate_to_pool(POOL)
    m.malloc(2, 3 * MiB, S)
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (40 * MiB, 20 * MiB)
    m.free(1)
    m.release_pool(POOL)
    m.empty_cache()  # unmaps the pool's wholly free page; the default range's page holds
    # block 2, so it stays mapped
    assert (m.reserved_bytes, m.reserved_by_pool[POOL], POOL in m.graphs.pools) == \
        (20 * MiB, 0, False)


def test_a_stream_that_joins_a_capture_allocates_from_its_pool():
    m = make()
    m.begin_allocate_to_pool(POOL, {S})
    m.join_capture(POOL, T)  # T waited on the capturing stream: it captures into the pool too
    m.malloc(1, 3 * MiB, T)  # the pool's large pool, keyed by stream T: a 20 MiB segment
    m.end_allocate_to_pool(POOL)
    m.malloc(2, 3 * MiB, T)  # after the capture T allocates from the default pool again
    assert (m.reserved_bytes, m.reserved_by_pool[POOL], m.reserved_by_stream[T]) == \
        (40 * MiB, 20 * MiB, 40 * MiB)


def test_a_mem_pool_is_held_by_the_mem_pool_and_takes_every_stream_inside_use_mem_pool():
    """torch.cuda.MemPool: createOrIncrefPool makes the pool (use_count 1, no routing);
    use_mem_pool begins allocating to it with a filter that takes the thread's allocations on
    any stream (EVERY_STREAM), and its exit ends that and drops its user: the MemPool still
    holds the pool, so an empty_cache keeps its free segment. ~MemPool: releasePool, then
    emptyCache of that pool alone: its free segment goes, the default pool's stays."""
    from memlens.allocator.graph_pools import EVERY_STREAM

    m = make()
    m.create_pool(POOL)
    assert (m.reserved_bytes, m.graphs.pools[POOL].use_count) == (0, 1)
    m.begin_allocate_to_pool(POOL, {EVERY_STREAM})  # use_mem_pool(pool)
    m.malloc(1, 3 * MiB, S)
    m.malloc(2, 3 * MiB, T)  # another stream's, inside the context: the pool's too
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (40 * MiB, 40 * MiB)
    m.end_allocate_to_pool(POOL)
    m.release_pool(POOL)
    m.free(1)
    m.malloc(3, 3 * MiB, S)  # outside the context: a default segment of its own
    m.free(3)
    m.empty_cache()  # the default 20 MiB goes; the MemPool holds its pool
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (40 * MiB, 40 * MiB)
    m.malloc(4, 3 * MiB, S)  # a default segment again, cached after its free
    m.free(4)
    m.release_pool(POOL)  # the MemPool is destroyed
    m.empty_cache(POOL)  # only its pool: S's free 20 MiB goes, T's holds block 2
    assert (m.reserved_bytes, m.reserved_by_pool[POOL]) == (40 * MiB, 20 * MiB)
    m.free(2)
    m.empty_cache(POOL)
    assert (m.reserved_bytes, m.reserved_by_pool[POOL], POOL in m.graphs.pools) == \
        (20 * MiB, 0, False)
