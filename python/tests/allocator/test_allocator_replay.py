"""replay(): the ledger's event stream of one device through the allocator model."""

import random
import time
from array import array

import pytest

from memlens.allocator.config import parse_alloc_conf
from memlens.allocator.replay import _downsample, replay

MiB = 1 << 20
GiB = 1 << 30


def test_peaks_and_fragmentation_of_a_hand_worked_stream():
    events = [
        ("alloc", 1, 1000, 0),  # 1,024 B block; reserved 2 MiB
        ("alloc", 2, 5 * MiB + 1, 0),  # 5,243,392 B block; reserved 2 + 20 = 22 MiB
        ("free", 1, 0, 0),
        ("alloc", 3, 25_000_000, 0),  # a whole 25,165,824 B segment; reserved 48,234,496
        ("free", 3, 0, 0),
        ("free", 2, 0, 0),
    ]
    r = replay(events, "", 80 * GiB)
    assert r.events == 6
    assert r.peak_reserved == 48_234_496
    assert r.peak_reserved_event == 3
    assert r.allocated_at_peak_reserved == 5_243_392 + 25_165_824  # 30,409,216
    assert r.fragmentation_bytes == 48_234_496 - 30_409_216  # 17,825,280 cached, unused
    assert r.fragmentation_ratio == pytest.approx(17_825_280 / 48_234_496)
    assert r.segments_at_peak_reserved == 3
    assert r.peak_allocated == 30_409_216
    assert r.first_oom_event is None and r.num_ooms == 0
    assert r.series_event == (0, 1, 2, 3, 4, 5)
    assert r.series_reserved == (2 * MiB, 22 * MiB, 22 * MiB, 48_234_496, 48_234_496,
                                 48_234_496)
    assert r.series_allocated == (1024, 5_244_416, 5_243_392, 30_409_216, 5_243_392, 0)


def test_the_first_oom_is_reported_and_its_free_ignored():
    events = [
        ("alloc", 1, 60 * MiB, 0),
        ("alloc", 2, 60 * MiB, 0),  # 60 + 60 > 100 MiB, nothing to release: OOM
        ("free", 2, 0, 0),  # the failed block never existed
        ("free", 1, 0, 0),
        ("alloc", 3, 30 * MiB, 0),  # served from the cached 60 MiB segment, split
    ]
    r = replay(events, parse_alloc_conf(""), 100 * MiB)
    assert r.first_oom_event == 1
    assert r.first_oom_message.startswith("CUDA out of memory. Tried to allocate 60.00 MiB. "
                                          "GPU 0 has a total capacity of 100.00 MiB of which "
                                          "40.00 MiB is free.")
    assert (r.num_ooms, r.num_alloc_retries) == (1, 1)
    assert (r.first_oom.requested, r.first_oom.reserved, r.first_oom.allocated) == \
        (60 * MiB, 60 * MiB, 60 * MiB)
    assert r.peak_reserved == 60 * MiB
    assert r.final_stats["allocated_bytes.all.current"] == 30 * MiB


def test_unknown_event_kinds_are_refused():
    with pytest.raises(ValueError, match="event 0: kind must be 'alloc' or 'free'"):
        replay([("malloc", 1, 10, 0)], "", GiB)


def test_downsampling_keeps_the_largest_point_of_each_stretch():
    values = array("q", [1, 5, 2, 7, 3, 3, 0, 0, 9, 4])
    # 10 points into at most 4: stretches of ceil(10 / 4) = 3: [1,5,2] [7,3,3] [0,0,9] [4]
    assert _downsample(values, 4) == [1, 3, 8, 9]
    assert _downsample(values, 10) == list(range(10))


def training_like(n_allocs, seed=0):
    """Layers allocate activations (kept until a backward-like unwinding) and temporaries
    (freed at once), 64 B to ~384 MiB."""
    rng = random.Random(seed)
    events, live, next_id = [], [], 0
    sizes = [64, 512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20, 24 << 20, 64 << 20, 256 << 20]
    while next_id < n_allocs:
        for _ in range(min(rng.randint(5, 40), n_allocs - next_id)):
            size = max(1, int(rng.choice(sizes) * rng.uniform(0.5, 1.5)))
            events.append(("alloc", next_id, size, 0))
            if rng.random() < 0.6:
                events.append(("free", next_id, 0, 0))
            else:
                live.append(next_id)
            next_id += 1
        if len(live) > 400 or rng.random() < 0.05:
            events += [("free", block_id, 0, 0) for block_id in reversed(live)]
            live.clear()
    events += [("free", block_id, 0, 0) for block_id in reversed(live)]
    return events


def test_long_streams_are_downsampled_around_the_peak():
    events = training_like(5000)
    r = replay(events, "", 140 * GiB, max_points=100)
    assert len(r.series_event) <= 100
    assert max(r.series_reserved) == r.peak_reserved
    assert r.peak_allocated <= r.peak_reserved
    assert list(r.series_event) == sorted(r.series_event)


@pytest.mark.parametrize("conf", ["", "expandable_segments:True"])
def test_replay_speed(conf):
    # 100,000 events; at the measured ~4 us per event this takes ~0.4 s. The bound is loose
    # so a busy machine does not fail it, but a slowdown of an order of magnitude would.
    events = training_like(50_000)
    assert len(events) == 100_000
    start = time.process_time()
    replay(events, conf, 140 * GiB)
    assert time.process_time() - start < 4.0
