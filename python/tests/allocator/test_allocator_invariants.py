"""Random allocation streams must keep the model's books consistent: every segment is an
unbroken chain of blocks, no two free neighbours are left unmerged, the statistics agree with
the blocks, and torch's own memory_viz accepts the snapshot."""

import random

import pytest

from memlens.allocator.caching import CachingAllocatorModel
from memlens.allocator.config import parse_alloc_conf
from memlens.allocator.snapshot import memory_snapshot

MiB = 1 << 20
GiB = 1 << 30
CONFIGS = ["", "expandable_segments:True", "max_split_size_mb:64",
           "roundup_power2_divisions:[1:4,64:8,>:2]",
           "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9"]


def random_stream(seed, n=3000, streams=(0,)):
    rng = random.Random(seed)
    live, events = [], []
    sizes = [1, 700, 4096, 1 * MiB, 1 * MiB + 1, 3 * MiB, 9 * MiB, 25_000_000, 90 * MiB, 300 * MiB]
    for block_id in range(n):
        size = max(0, int(rng.choice(sizes) * rng.uniform(0.3, 1.7)))
        events.append(("alloc", block_id, size, rng.choice(streams)))
        live.append(block_id)
        while live and rng.random() < 0.5:
            events.append(("free", live.pop(rng.randrange(len(live))), 0, 0))
    events += [("free", block_id, 0, 0) for block_id in live]
    return events


def check_books(model):
    snapshot = memory_snapshot(model)
    segments = snapshot["segments"]
    assert sum(s["total_size"] for s in segments) == model.reserved_bytes
    assert sum(s["allocated_size"] for s in segments) == model.allocated_bytes
    assert len(segments) == model.segment_count()
    stats = model.memory_stats()
    assert stats["reserved_bytes.all.current"] == model.reserved_bytes
    assert stats["reserved_bytes.all.current"] == \
        stats["reserved_bytes.small_pool.current"] + stats["reserved_bytes.large_pool.current"]
    for segment in segments:
        address = segment["address"]
        previous_free = False
        for block in segment["blocks"]:
            assert block["address"] == address  # chains are contiguous
            address += block["size"]
            free = block["state"] == "inactive"
            assert not (free and previous_free), "two free neighbours left unmerged"
            previous_free = free
            assert block["size"] % 512 == 0
    if not model.config.expandable_segments:
        split_free = sum(b["size"] for s in segments if len(s["blocks"]) > 1
                         for b in s["blocks"] if b["state"] == "inactive")
        assert stats["inactive_split_bytes.all.current"] == split_free
    return snapshot


@pytest.mark.parametrize("conf", CONFIGS)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_streams_keep_the_books(conf, seed):
    model = CachingAllocatorModel(parse_alloc_conf(conf), 4 * GiB)
    failed = set()
    for i, (kind, block_id, size, stream) in enumerate(random_stream(seed, streams=(0, 3))):
        if kind == "alloc":
            if not model.malloc(block_id, size, stream).ok:
                failed.add(block_id)
        elif block_id in failed:
            failed.discard(block_id)
        else:
            model.free(block_id)
        if i % 97 == 0:
            check_books(model)
    # everything is free again: allocated is 0 and emptying the cache returns every byte
    assert model.allocated_bytes == 0
    model.empty_cache()
    assert model.reserved_bytes == 0
    assert model.segment_count() == 0
    stats = model.memory_stats()
    assert stats["inactive_split.all.current"] == 0
    assert stats["requested_bytes.all.current"] == 0


def test_torch_memory_viz_accepts_the_snapshot():
    memory_viz = pytest.importorskip("torch.cuda._memory_viz")
    model = CachingAllocatorModel(parse_alloc_conf(""), 4 * GiB)
    for kind, block_id, size, stream in random_stream(5, n=400)[:500]:
        if kind == "alloc":
            model.malloc(block_id, size, stream)
        else:
            model.free(block_id)
    snapshot = check_books(model)
    summary = memory_viz.segsum(snapshot)  # asserts its own accounting adds up
    assert f"segments: {model.segment_count()}" in summary
