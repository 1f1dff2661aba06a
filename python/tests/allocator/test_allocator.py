"""The caching allocator model on sequences worked out by hand from the rules of
c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.13). Every number is derived in a comment."""

import pytest

from memlens.allocator.caching import CachingAllocatorModel
from memlens.allocator.config import parse_alloc_conf
from memlens.allocator.sizes import allocation_size, round_size
from memlens.allocator.snapshot import memory_snapshot

MiB = 1 << 20
GiB = 1 << 30


def make(conf: str = "", total: int = 80 * GiB, **kwargs) -> CachingAllocatorModel:
    return CachingAllocatorModel(parse_alloc_conf(conf), total, **kwargs)


def stat(model, key):
    return model.memory_stats()[key]


# -- REFERENCES.md §3 worked examples ---------------------------------------------------------
def test_1000_bytes_is_a_1024_byte_block_in_a_2_mib_small_segment():
    m = make()
    r = m.malloc(1, 1000)
    # 1000 rounds up to 2 x 512 = 1,024; <= 1 MiB: small pool, a 2 MiB segment, and the
    # 2,097,152 - 1,024 = 2,096,128 B left is >= 512 B, so it is split off and cached.
    assert (r.ok, r.size) == (True, 1024)
    assert m.reserved_bytes == 2_097_152
    assert m.allocated_bytes == 1024
    assert stat(m, "segment.small_pool.current") == 1
    assert stat(m, "inactive_split_bytes.small_pool.current") == 2_096_128
    assert stat(m, "requested_bytes.all.current") == 1000
    [segment] = memory_snapshot(m)["segments"]
    assert (segment["total_size"], segment["segment_type"]) == (2_097_152, "small")
    assert [(b["size"], b["state"]) for b in segment["blocks"]] == \
        [(1024, "active_allocated"), (2_096_128, "inactive")]


def test_5_mib_plus_1_is_a_5243392_byte_block_in_a_20_mib_segment():
    m = make()
    r = m.malloc(1, 5 * MiB + 1)
    # ceil(5,242,881 / 512) = 10,241 blocks of 512 = 5,243,392; between 1 and 10 MiB: a 20 MiB
    # segment (20,971,520); the 15,728,128 B left is > 1 MiB, so it is split off.
    assert r.size == 5_243_392
    assert m.reserved_bytes == 20_971_520
    assert stat(m, "segment.large_pool.current") == 1
    assert stat(m, "inactive_split_bytes.large_pool.current") == 15_728_128


def test_25_million_bytes_rounds_to_25000448_in_a_25165824_byte_segment():
    m = make()
    # ceil(25,000,000 / 512) = 48,829 x 512 = 25,000,448; >= 10 MiB: the segment is rounded up
    # to 2 MiB: 12 x 2,097,152 = 25,165,824.
    assert round_size(25_000_000, m.config) == 25_000_448
    assert allocation_size(25_000_448, m.config) == 25_165_824
    r = m.malloc(1, 25_000_000)
    # The 165,376 B tail is not > 1 MiB, so PyTorch does not split it: the block handed out is
    # the whole segment, and memory_allocated() counts all 25,165,824 B.
    assert r.size == 25_165_824
    assert m.reserved_bytes == 25_165_824
    assert m.allocated_bytes == 25_165_824
    assert stat(m, "requested_bytes.all.current") == 25_000_000
    assert stat(m, "inactive_split.all.current") == 0


# -- splitting, merging, reuse -----------------------------------------------------------------
def test_split_then_merge_back_into_one_releasable_segment():
    m = make()
    a = m.malloc(1, 2 * MiB)  # 2,097,152: large pool, a 20 MiB segment, 18,874,368 B split off
    b = m.malloc(2, 3 * MiB)  # best fit: that piece; split again, 18,874,368 - 3,145,728 left
    assert b.address == a.address + 2 * MiB
    assert m.reserved_bytes == 20 * MiB and stat(m, "segment.all.current") == 1
    assert stat(m, "inactive_split.all.current") == 1
    assert stat(m, "inactive_split_bytes.all.current") == 15_728_640

    m.free(1)  # neighbours: none before, B (allocated) after: no merge; 2 free pieces now
    assert stat(m, "inactive_split.all.current") == 2
    assert stat(m, "inactive_split_bytes.all.current") == 15_728_640 + 2_097_152

    m.free(2)  # merges with A before and the tail after: one unsplit 20 MiB block
    assert stat(m, "inactive_split.all.current") == 0
    assert stat(m, "inactive_split_bytes.all.current") == 0
    [segment] = memory_snapshot(m)["segments"]
    assert [(blk["size"], blk["state"]) for blk in segment["blocks"]] == \
        [(20 * MiB, "inactive")]

    m.empty_cache()  # unsplit and free: cudaFree'd
    assert m.reserved_bytes == 0
    assert stat(m, "num_device_free") == 1


def test_a_cached_block_serves_a_later_request_without_a_new_segment():
    m = make()
    first = m.malloc(1, 8 * MiB)  # 8,388,608 < 10 MiB: a 20 MiB segment, 12,582,912 split off
    m.free(1)  # merges back: one cached 20,971,520 B block
    again = m.malloc(2, 12 * MiB)  # best fit: the cached 20 MiB block; 8 MiB left (> 1 MiB): split
    assert again.address == first.address
    assert again.size == 12 * MiB
    assert m.reserved_bytes == 20 * MiB
    assert stat(m, "num_device_alloc") == 1


def test_pools_are_per_stream():
    m = make()
    m.malloc(1, 1000, stream=0)
    m.free(1)
    m.malloc(2, 1000, stream=7)  # stream 0's cached segment is not offered to stream 7
    assert m.reserved_bytes == 2 * 2 * MiB
    assert m.segment_count() == 2
    m.malloc(3, 1000, stream=0)  # stream 0's cached block is reused
    assert m.reserved_bytes == 4 * MiB


# -- max_split_size_mb -------------------------------------------------------------------------
def test_max_split_size_keeps_oversize_blocks_from_small_requests():
    m = make("max_split_size_mb:20")  # 20,971,520: blocks this big are never split
    x = m.malloc(1, 30 * MiB)  # a 31,457,280 B segment, oversize
    assert stat(m, "oversize_segments.current") == 1
    assert stat(m, "oversize_allocations.current") == 1
    m.free(1)
    # 12 MiB < max_split while the cached 30 MiB block >= max_split: refused, new segment
    # (12,582,912 is a multiple of 2 MiB): 31,457,280 + 12,582,912 = 44,040,192 reserved.
    y = m.malloc(2, 12 * MiB)
    assert y.address != x.address
    assert m.reserved_bytes == 44_040_192
    # 28 MiB >= max_split may take the 30 MiB block: it is under 28 + 20 (the default
    # max_non_split_rounding) MiB; oversize blocks are not split, so it gets all 31,457,280 B.
    z = m.malloc(3, 28 * MiB)
    assert (z.address, z.size) == (x.address, 30 * MiB)
    assert m.reserved_bytes == 44_040_192
    assert m.allocated_bytes == 12 * MiB + 30 * MiB


def test_oversize_block_reuse_is_limited_by_max_non_split_rounding():
    m = make("max_split_size_mb:20")
    m.malloc(1, 50 * MiB)
    m.free(1)
    # 21 MiB + 20 MiB = 41 MiB <= 50 MiB: too much waste, refused. New segment: 22,020,096
    # rounded up to 2 MiB = 11 x 2,097,152 = 23,068,672; 52,428,800 + 23,068,672 = 75,497,472.
    m.malloc(2, 21 * MiB)
    assert m.reserved_bytes == 75_497_472

    m = make("max_split_size_mb:20,max_non_split_rounding_mb:40")
    m.malloc(1, 50 * MiB)
    m.free(1)
    r = m.malloc(2, 21 * MiB)  # 21 + 40 = 61 MiB > 50 MiB: allowed, the whole block is used
    assert r.size == 50 * MiB
    assert m.reserved_bytes == 50 * MiB


# -- roundup_power2_divisions ------------------------------------------------------------------
def test_roundup_power2_divisions_single_value():
    config = parse_alloc_conf("roundup_power2_divisions:4")
    # 5,000,000 lies in [4 MiB, 8 MiB); 4 steps of 1 MiB: 4, 5, 6, 7 MiB -> 5 MiB = 5,242,880.
    assert round_size(5_000_000, config) == 5_242_880
    # 1,200 is not above 512 x 4 = 2,048: plain 512 B rounding, 1,536.
    assert round_size(1200, config) == 1536
    # an exact power of two stays as it is
    assert round_size(4 * MiB, config) == 4 * MiB
    m = CachingAllocatorModel(config, 80 * GiB)
    assert m.malloc(1, 5_000_000).size == 5_242_880


def test_roundup_power2_divisions_list_form():
    config = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4]")
    # 300 MiB: 1 division (off): 314,572,800 is already a multiple of 512.
    assert round_size(300 * MiB, config) == 314_572_800
    # 600 MiB: 2 divisions of [512, 1024) MiB: 512, 768 MiB -> 805,306,368.
    assert round_size(600 * MiB, config) == 805_306_368
    # 1,600,000,000: 4 divisions of [1, 2) GiB (steps of 268,435,456): 1 GiB + 2 steps
    # = 1,610,612,736.
    assert round_size(1_600_000_000, config) == 1_610_612_736
    m = CachingAllocatorModel(config, 80 * GiB)
    r = m.malloc(1, 600 * MiB)  # segment: 805,306,368 is a multiple of 2 MiB already
    assert (r.size, m.reserved_bytes) == (805_306_368, 805_306_368)


# -- ids ---------------------------------------------------------------------------------------
def test_zero_byte_requests_take_nothing():
    m = make()
    r = m.malloc(1, 0)  # PyTorch hands out nullptr for 0 bytes without touching the pools
    assert (r.ok, r.size, r.address) == (True, 0, None)
    assert m.reserved_bytes == 0
    m.free(1)
    assert stat(m, "allocation.all.allocated") == 0


def test_misused_ids_are_refused():
    m = make()
    m.malloc(1, 100)
    with pytest.raises(ValueError, match="already allocated"):
        m.malloc(1, 100)
    with pytest.raises(KeyError):
        m.free(2)


def test_pytorch_test_allocator_settings_expectations():
    # PyTorch's test_cuda.py::test_allocator_settings: 21 Mi float32 (88,080,384 B) adds
    # exactly its size to active bytes by default, and power2_div(nbytes, 4) with
    # roundup_power2_divisions:4, i.e. 64 MiB + 2 x 16 MiB = 96 MiB (100,663,296).
    nbytes = 4 * 21 * MiB
    plain = make()
    plain.malloc(1, nbytes)
    assert stat(plain, "active_bytes.all.allocated") == nbytes
    rounded = make("roundup_power2_divisions:4")
    rounded.malloc(1, nbytes)
    assert stat(rounded, "active_bytes.all.allocated") == 96 * MiB
    assert stat(rounded, "requested_bytes.all.allocated") == nbytes


def test_history_records_memory_viz_trace_actions():
    m = make(record_history=True)
    first = m.malloc(1, 1000)
    m.free(1)
    m.empty_cache()
    trace = memory_snapshot(m)["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [
        ("segment_alloc", 2 * MiB),  # the segment comes first, so the block lies inside it
        ("alloc", 1000),  # TraceEntry sizes are the requested bytes, as in PyTorch
        ("free_requested", 1000),
        ("free_completed", 1000),
        ("segment_free", 2 * MiB),
    ]
    assert trace[1]["addr"] == trace[0]["addr"] == first.address
    assert trace[1]["block_id"] == 1
