"""Streams in the caching allocator model, on sequences worked out by hand from
c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.13):
- get_free_block searches the pool with the key (stream, size): a cached block serves only
  requests of the stream it was allocated on;
- recordStream adds a stream to block->stream_uses (not the allocation stream itself); free()
  of such a block drops allocated bytes but calls insert_events instead of free_block;
- process_events, at the start of malloc, frees the blocks whose events completed (here: the
  recording stream was waited for by the host or by the block's own stream, after the free);
- release_cached_blocks (empty_cache, the last retry before an OOM) first runs
  synchronize_and_free_events.
Sizes: 3 MiB (3,145,728 B, a multiple of 512) is a large-pool request below 10 MiB, so a miss
cudaMallocs a 20 MiB segment (kLargeBuffer) and splits off the 17 MiB rest (> kSmallSize).
12 MiB is >= kMinLargeAlloc: its segment is 12 MiB rounded to 2 MiB, 12 MiB, never split."""

from memlens.allocator import replay
from memlens.allocator.caching import CachingAllocatorModel
from memlens.allocator.config import parse_alloc_conf
from memlens.allocator.snapshot import memory_snapshot
from memlens.allocator.stream_events import ALL_STREAMS, HOST

MiB = 1 << 20
A, B, C = 1, 2, 3  # stream ids


def make() -> CachingAllocatorModel:
    return CachingAllocatorModel(parse_alloc_conf(""), 80 << 30)


def test_a_block_freed_on_one_stream_is_not_reused_by_another():
    m = make()
    first = m.malloc(1, 3 * MiB, A)  # miss: a 20 MiB segment for stream A
    m.free(1)  # merged back with its 17 MiB rest: one free 20 MiB block, stream A's pool
    assert (m.reserved_bytes, m.allocated_bytes) == (20 * MiB, 0)
    other = m.malloc(2, 3 * MiB, B)  # key (B, 3 MiB): nothing of stream B: a new 20 MiB segment
    assert m.reserved_bytes == 40 * MiB and other.address != first.address
    again = m.malloc(3, 3 * MiB, A)  # stream A's cached block fits: reserved stays 40 MiB
    assert m.reserved_bytes == 40 * MiB and again.address == first.address
    segments = memory_snapshot(m)["segments"]
    assert sorted((s["stream"], s["total_size"]) for s in segments) == \
        [(A, 20 * MiB), (B, 20 * MiB)]


def test_the_same_sequence_on_one_stream_reuses_the_segment():
    # The single-pool view (every allocation on stream 0): the second 3 MiB takes the cached
    # 20 MiB block, so reserved stays 20 MiB; streams cost one 20 MiB segment more.
    events = [("alloc", 1, 3 * MiB, A), ("free", 1, 3 * MiB, A), ("alloc", 2, 3 * MiB, B)]
    assert replay(events).peak_reserved == 40 * MiB
    single = [(kind, i, n, 0) for kind, i, n, _ in events]
    assert replay(single).peak_reserved == 20 * MiB


def test_record_stream_keeps_the_block_out_of_its_pool_until_its_stream_waits():
    m = make()
    first = m.malloc(1, 12 * MiB, A)  # a 12 MiB segment, unsplit
    m.record_stream(1, B)  # used on B: stream_uses = {B}
    m.free(1)  # insert_events: one event on B; allocated bytes drop now, the block stays out
    assert (m.allocated_bytes, m.reserved_bytes) == (0, 12 * MiB)
    assert [b["state"] for s in memory_snapshot(m)["segments"] for b in s["blocks"]] == \
        ["active_pending_free"]
    m.stream_waited(C, B)  # a third stream waiting on B says nothing about A's next work
    second = m.malloc(2, 12 * MiB, A)  # process_events: the event is not done: a new segment
    assert m.reserved_bytes == 24 * MiB and second.address != first.address
    m.free(2)  # no stream uses: straight back to A's pool
    m.stream_waited(A, B)  # A waits on B after the free: the event counts as complete
    third = m.malloc(3, 12 * MiB, A)  # process_events returns block 1; best fit at the lower
    assert m.reserved_bytes == 24 * MiB and third.address == first.address  # address
    fourth = m.malloc(4, 12 * MiB, A)  # and block 2's segment serves the next one
    assert m.reserved_bytes == 24 * MiB and fourth.address == second.address


def test_record_stream_on_the_allocation_stream_is_ignored():
    m = make()
    first = m.malloc(1, 12 * MiB, A)
    m.record_stream(1, A)  # "ignore uses on the allocation stream"
    m.free(1)  # plain free_block: reusable at once
    assert m.malloc(2, 12 * MiB, A).address == first.address and m.reserved_bytes == 12 * MiB


def test_an_event_recorded_before_the_free_does_not_complete_it():
    m = make()
    first = m.malloc(1, 12 * MiB, A)  # tick 1
    m.record_stream(1, B)
    early = m.clock  # an event recorded on B now (tick 1) covers work queued before the free
    m.free(1)  # tick 2: the allocator's event on B
    m.stream_waited(A, B, early)  # A.wait_event(early): 1 < 2, not complete
    assert m.malloc(2, 12 * MiB, A).address != first.address  # a second 12 MiB segment
    late = m.clock  # an event recorded on B after the free
    m.stream_waited(HOST, B, late)  # Event.synchronize(): the host waited for B up to it
    assert m.malloc(3, 12 * MiB, A).address == first.address
    assert m.reserved_bytes == 24 * MiB


def test_events_on_one_stream_complete_in_order():
    m = make()
    a = m.malloc(1, 12 * MiB, A)
    c = m.malloc(2, 12 * MiB, C)
    for block_id in (1, 2):
        m.record_stream(block_id, B)
    m.free(1)  # event on B at tick 3 (block of A)
    m.free(2)  # event on B at tick 4 (block of C)
    m.stream_waited(C, B)  # C waited on B: block 2's event completes, and so does the earlier one
    assert m.malloc(3, 12 * MiB, A).address == a.address
    assert m.malloc(4, 12 * MiB, C).address == c.address
    assert m.reserved_bytes == 24 * MiB


def test_empty_cache_synchronizes_and_releases_pending_blocks():
    m = make()
    m.malloc(1, 12 * MiB, A)
    m.record_stream(1, B)
    m.free(1)
    m.empty_cache()  # synchronize_and_free_events, then release_blocks: the segment goes
    assert m.reserved_bytes == 0 and not m.events


def test_a_device_synchronize_completes_every_stream():
    m = make()
    first = m.malloc(1, 3 * MiB, A)
    m.record_stream(1, B)
    m.record_stream(1, C)  # two events: event_count 2
    m.free(1)
    m.stream_waited(HOST, B)  # one of two: still pending
    assert m.malloc(2, 3 * MiB, A).address == first.address + 3 * MiB  # the 17 MiB rest
    m.stream_waited(HOST, ALL_STREAMS)  # torch.cuda.synchronize()
    assert m.malloc(3, 3 * MiB, A).address == first.address  # the 3 MiB block is back


def test_replay_follows_record_stream_and_waits():
    # The record_stream test above as an event list: 12 MiB pending, a second 12 MiB segment,
    # then A waits on B (marker 3: the ticks of malloc 1, free 1, malloc 2) and block 1 is
    # reused, so reserved peaks at 24 MiB, not 36 MiB.
    events = [("alloc", 1, 12 * MiB, A), ("record_stream", 1, 0, B), ("free", 1, 0, A),
              ("alloc", 2, 12 * MiB, A), ("wait", A, 3, B), ("alloc", 3, 12 * MiB, A)]
    result = replay(events)
    assert (result.events, result.peak_reserved) == (4, 24 * MiB)
    no_wait = [e for e in events if e[0] != "wait"]
    assert replay(no_wait).peak_reserved == 36 * MiB


def test_reserved_memory_is_counted_per_stream_and_released_per_stream():
    # Each segment belongs to the stream whose pool made it (get_free_block's key): A's 3 MiB
    # miss cudaMallocs a 20 MiB segment for A, B's 12 MiB (>= 10 MiB: exactly 12 MiB, unsplit)
    # one for B, and a 2 MiB small-pool segment for B's 4 KiB (<= 1 MiB: kSmallBuffer).
    m = make()
    m.malloc(1, 3 * MiB, A)
    m.malloc(2, 12 * MiB, B)
    m.malloc(3, 4096, B)
    assert m.reserved_by_stream == {A: 20 * MiB, B: 14 * MiB}
    assert sum(m.reserved_by_stream.values()) == m.reserved_bytes == 34 * MiB
    m.free(2)
    m.free(3)
    m.empty_cache()  # B's two segments are wholly free: released; A's is in use: kept
    assert m.reserved_by_stream == {A: 20 * MiB, B: 0} and m.reserved_bytes == 20 * MiB


def test_expandable_segments_count_mapped_pages_per_stream():
    # expandable_segments:True: each stream's pool maps 20 MiB pages (large) of its own
    # segment; 3 MiB on A maps one page, 25 MiB on B two (40 MiB).
    m = CachingAllocatorModel(parse_alloc_conf("expandable_segments:True"), 80 << 30)
    m.malloc(1, 3 * MiB, A)
    m.malloc(2, 25 * MiB, B)
    assert m.reserved_by_stream == {A: 20 * MiB, B: 40 * MiB}
    m.free(2)
    m.empty_cache()  # B's pages are unmapped
    assert m.reserved_by_stream == {A: 20 * MiB, B: 0} == {A: m.reserved_bytes, B: 0}
