"""expandable_segments:True: one growing range per pool and stream, backed in 20 MiB pages
(large pool) or 2 MiB pages (small pool); hand-derived from find_expandable_block, map_block,
unmap_block and release_blocks in c10/cuda/CUDACachingAllocator.cpp."""

from memlens.allocator.caching import CachingAllocatorModel
from memlens.allocator.config import parse_alloc_conf

MiB = 1 << 20
GiB = 1 << 30
PAGE = 20 * MiB  # large-pool page = large_segment_size


def make(conf="expandable_segments:True", total=80 * GiB):
    return CachingAllocatorModel(parse_alloc_conf(conf), total)


def test_large_pool_grows_page_by_page_and_stays_one_segment():
    m = make()
    b1 = m.malloc(1, 12 * MiB)  # a new range; map ceil(12 MiB / 20 MiB) = 1 page
    assert m.reserved_bytes == PAGE
    assert b1.size == 12 * MiB  # split even though 8 MiB is left (>= 512 B suffices here)
    b2 = m.malloc(2, 12 * MiB)  # 8 MiB free + unmapped space: map 1 more page, merge, split
    assert b2.address == b1.address + 12 * MiB
    assert m.reserved_bytes == 2 * PAGE
    b3 = m.malloc(3, 30 * MiB)  # 16 MiB free at the end: needs 14 MiB more, 1 page
    assert b3.address == b1.address + 24 * MiB
    assert m.reserved_bytes == 3 * PAGE  # 62,914,560 for 54 MiB allocated
    assert m.allocated_bytes == 54 * MiB
    assert m.segment_count() == 1  # one contiguous mapped range
    # PyTorch counts no cudaMalloc segment for mapped pages; reserved bytes do count them.
    stats = m.memory_stats()
    assert stats["segment.all.current"] == 0
    assert stats["reserved_bytes.large_pool.current"] == 3 * PAGE
    assert stats["num_device_alloc"] == 3


def test_empty_cache_unmaps_only_whole_free_pages():
    m = make()
    m.malloc(1, 12 * MiB)  # [0, 12) MiB
    m.malloc(2, 12 * MiB)  # [12, 24) MiB
    m.malloc(3, 30 * MiB)  # [24, 54) MiB; pages [0,20) [20,40) [40,60) MiB
    m.free(2)
    m.empty_cache()  # [12, 24) MiB covers no whole page: nothing to unmap
    assert m.reserved_bytes == 3 * PAGE
    m.free(3)  # merges into one free block [12, 60) MiB
    m.empty_cache()  # pages [20,40) and [40,60) lie inside it: unmapped; [12,20) stays free
    assert m.reserved_bytes == PAGE
    assert m.memory_stats()["num_device_free"] == 1  # one unmap call for both pages
    assert m.segment_count() == 1
    b4 = m.malloc(4, 8 * MiB)  # the free [12, 20) MiB block fits exactly: no mapping
    assert m.reserved_bytes == PAGE
    assert b4.address - m.active[1].addr == 12 * MiB


def test_small_pool_uses_2_mib_pages():
    m = make()
    m.malloc(1, 1000)  # 1,024 B: small pool, its own range, one 2 MiB page
    assert m.reserved_bytes == 2 * MiB
    m.malloc(2, 1 * MiB)  # 1,048,576 fits in the 2,096,128 B left of the page
    assert m.reserved_bytes == 2 * MiB
    m.malloc(3, 1 * MiB)  # 1,047,552 left: one more page
    assert m.reserved_bytes == 4 * MiB
    assert m.segment_count() == 1


def test_freeing_everything_and_emptying_the_cache_returns_every_page():
    m = make()
    for i, size in enumerate([1000, 12 * MiB, 5 * MiB, 40 * MiB, 300]):
        m.malloc(i, size)
    for i in range(5):
        m.free(i)
    m.empty_cache()
    assert m.reserved_bytes == 0
    assert m.segment_count() == 0
    assert m.expandable_segments == []  # wholly unmapped ranges are given back too


def test_reserved_stays_close_to_allocated_where_segments_would_fragment():
    # 20 requests of 11 MiB + 1: without expandable segments each is a 12 MiB segment (2 MiB
    # rounding); with them they tile one range and only the last page is partly empty.
    sizes = [11 * MiB + 1] * 20
    plain, growing = make(""), make()
    for i, size in enumerate(sizes):
        plain.malloc(i, size)
        growing.malloc(i, size)
    assert plain.reserved_bytes == 20 * 12 * MiB
    # 20 x 11,534,848 (11 MiB + 512) = 230,696,960 B, just over 11 pages (230,686,720): 12.
    assert growing.allocated_bytes == 230_696_960
    assert growing.reserved_bytes == 12 * PAGE


def test_expandable_oom_maps_nothing_and_reports():
    m = make(total=100 * MiB)
    assert m.malloc(1, 50 * MiB).ok  # 3 pages: 60 MiB
    r = m.malloc(2, 50 * MiB)  # 10 MiB free in page 3 + 2 more pages = 100 MiB: fits exactly
    assert r.ok and m.reserved_bytes == 100 * MiB
    r = m.malloc(3, 1 * MiB + 1)  # large pool, no free space, no page left
    assert not r.ok
    assert m.reserved_bytes == 100 * MiB
    assert r.oom.device_free == 0
    assert m.memory_stats()["num_ooms"] == 1
