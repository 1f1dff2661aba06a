"""Giving memory back: what the allocator frees on a miss before it reports out of memory
(release_available_cached_blocks, release_cached_blocks), the OOM report, and the garbage
collector (garbage_collect_cached_blocks). Hand-derived on a 100 MiB device."""

from memlens.allocator.caching import CachingAllocatorModel
from memlens.allocator.config import parse_alloc_conf

MiB = 1 << 20
GiB = 1 << 30


def make(conf="", total=100 * MiB, **kwargs):
    return CachingAllocatorModel(parse_alloc_conf(conf), total, **kwargs)


def test_cache_is_released_and_retried_before_oom_then_oom():
    m = make()
    m.malloc(1, 40 * MiB)  # 41,943,040 B segment
    m.malloc(2, 40 * MiB)  # reserved 80 MiB
    m.free(1)  # cached
    # 50 MiB: no cached block fits; 80 + 50 > 100 MiB so cudaMalloc fails; no max_split, so
    # release_available_cached_blocks does nothing; release_cached_blocks frees the cached
    # 40 MiB and the retry succeeds: 40 + 50 = 90 MiB reserved.
    r = m.malloc(3, 50 * MiB)
    assert r.ok
    assert m.reserved_bytes == 94_371_840
    stats = m.memory_stats()
    assert (stats["num_alloc_retries"], stats["num_device_free"], stats["num_ooms"]) == (1, 1, 0)

    # 20 MiB: 90 + 20 > 100, nothing cached to free, the retry fails too: out of memory.
    r = m.malloc(4, 20 * MiB)
    assert not r.ok and r.size == 0 and r.address is None
    oom = r.oom
    assert (oom.requested, oom.size, oom.alloc_size) == (20 * MiB, 20 * MiB, 20 * MiB)
    assert (oom.allocated, oom.reserved) == (94_371_840, 94_371_840)
    assert oom.device_free == 104_857_600 - 94_371_840  # 10,485,760
    assert oom.message == (
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
        "100.00 MiB of which 10.00 MiB is free. Of the allocated memory 90.00 MiB is allocated "
        "by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
        "True to avoid fragmentation.  See documentation for Memory Management  (https://docs."
        "pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-"
        "alloc-conf)")
    stats = m.memory_stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"]) == (2, 1)
    assert 4 not in m.active  # a failed request leaves no block behind


def test_the_oom_message_names_fragmented_cache():
    m = make()
    m.malloc(1, 2 * MiB)  # a 20 MiB segment, 18 MiB split off and cached
    m.malloc(2, 78 * MiB)  # 81,788,928: total reserved 98 MiB
    r = m.malloc(3, 30 * MiB)  # nothing fits; the 20 MiB segment is split, so it stays
    # "Tried to allocate" is the segment PyTorch asked cudaMalloc for (30 MiB here);
    # reserved - allocated = 98 - 80 = 18 MiB cached in the split segment.
    assert "Tried to allocate 30.00 MiB" in r.oom.message
    assert "of which 2.00 MiB is free" in r.oom.message
    assert "80.00 MiB is allocated by PyTorch, and 18.00 MiB is reserved by PyTorch but " \
           "unallocated" in r.oom.message


def test_a_request_bigger_than_the_device_is_an_oom_result():
    m = make(total=80 * GiB)
    r = m.malloc(1, 200 * GiB)
    assert not r.ok
    assert r.oom.requested == 200 * GiB
    assert r.oom.message.startswith("CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 "
                                    "has a total capacity of 80.00 GiB of which 80.00 GiB is free.")
    r = m.malloc(2, 1 << 61)  # refused before the allocator is asked, as PyTorch does
    assert r.oom.message == "CUDA out of memory. Tried to allocate more than 1EB memory."


def test_release_available_cached_blocks_frees_oversize_blocks_largest_first():
    m = make("max_split_size_mb:20")
    m.malloc(1, 30 * MiB)
    m.malloc(2, 30 * MiB)
    m.free(1)
    m.free(2)  # two cached oversize 30 MiB blocks: 60 MiB reserved
    # 50 MiB: 60 + 50 > 100 fails; no single cached block holds 50 MiB, so both oversize
    # blocks go, largest first (equal: higher address first), 60 >= 50 MiB: then it fits
    # without the full release, so no retry is counted.
    assert m.malloc(3, 50 * MiB).ok
    assert m.reserved_bytes == 50 * MiB
    stats = m.memory_stats()
    assert (stats["num_device_free"], stats["num_alloc_retries"]) == (2, 0)


def test_release_available_frees_just_the_best_fitting_oversize_block():
    m = make("max_split_size_mb:20")
    m.malloc(1, 30 * MiB)
    m.malloc(2, 60 * MiB)
    m.free(1)
    m.free(2)  # cached: 30 MiB and 60 MiB
    # 40 MiB: 90 + 40 > 100 fails; lower_bound(40 MiB) is the 60 MiB block: it alone goes.
    assert m.malloc(3, 40 * MiB).ok
    assert m.reserved_bytes == 30 * MiB + 40 * MiB
    assert m.memory_stats()["num_device_free"] == 1


def _gc_sequence(m):
    m.malloc(1, 30 * MiB)  # large-pool clock 1
    m.malloc(2, 20 * MiB)  # clock 2
    m.malloc(3, 12 * MiB)  # clock 3; reserved 31,457,280 + 20,971,520 + 12,582,912 = 65,011,712
    m.free(1)  # cached at clock 3
    m.free(3)  # cached at clock 3
    m.malloc(4, 12 * MiB)  # clock 4: reuses block 3's segment
    m.free(2)  # cached at clock 4
    return m.malloc(5, 40 * MiB)  # clock 5: ages are 1 (the 20 MiB) and 2 (the 30 MiB)


def test_garbage_collection_frees_the_older_cached_blocks_first():
    # allowed = 0.8 x 100 MiB = 83,886,080; GC threshold = 0.5 x allowed = 41,943,040.
    m = make("garbage_collection_threshold:0.5", memory_fraction=0.8)
    r = _gc_sequence(m)
    # At 40 MiB's miss: reserved 65,011,712 > 41,943,040, target 23,068,672; average age 1.5:
    # only the 30 MiB block (age 2) goes, which reclaims enough. Then 33,554,432 + 41,943,040
    # = 75,497,472 <= allowed: the new segment fits.
    assert r.ok
    assert m.reserved_bytes == 75_497_472
    stats = m.memory_stats()
    assert stats["num_device_free"] == 1
    assert stats["segment.all.current"] == 3  # the 20 MiB cached, 12 MiB reused, 40 MiB new
    assert stats["num_alloc_retries"] == 0


def test_garbage_collection_needs_a_memory_fraction_as_in_pytorch():
    # Same threshold, but no per-process memory fraction: PyTorch never runs the collector, and
    # on a device with room the cache just grows: 65,011,712 + 41,943,040 = 106,954,752.
    m = make("garbage_collection_threshold:0.5", total=1 * GiB)
    assert _gc_sequence(m).ok
    assert m.reserved_bytes == 106_954_752
    assert m.memory_stats()["num_device_free"] == 0


def test_memory_fraction_from_the_config_limits_reserved():
    m = make("per_process_memory_fraction:0.5")  # allowed 52,428,800
    assert m.allowed_max == 50 * MiB
    assert m.malloc(1, 40 * MiB).ok
    r = m.malloc(2, 20 * MiB)  # 40 + 20 > 50 MiB allowed, although the device has room
    assert not r.ok
    assert "50.00 MiB allowed; " in r.oom.message


def test_capacity_is_the_card_and_device_total_what_the_allocator_may_take():
    # An 80 GiB card whose CUDA context holds 512 MiB: the allocator may take 81,383,309,312 B.
    m = CachingAllocatorModel(parse_alloc_conf("per_process_memory_fraction:0.5"),
                              80 * GiB - 512 * MiB, capacity_bytes=80 * GiB)
    assert m.allowed_max == 40 * GiB  # the fraction is of the card, as in setMemoryFraction
    m.malloc(1, 30 * GiB)
    r = m.malloc(2, 20 * GiB)  # 30 + 20 > 40 GiB allowed
    # free = 80 GiB - 512 MiB - 30 GiB = 50,969,182,208 B = 49.50 GiB
    assert r.oom.message.startswith(
        "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
        "80.00 GiB of which 49.50 GiB is free. 40.00 GiB allowed; Of the allocated memory "
        "30.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.")
