"""torch.cuda.MemPool traced: scripts/cuda_graphs/mem_pool.py on the H100 target. The
allocator's rules (c10/cuda/CUDACachingAllocator.cpp, 2.13): a request of at most 1 MiB on a
miss cudaMallocs a 2 MiB segment, one below 10 MiB a 20 MiB segment; a MemPool is a private
pool that only allocations inside `use_mem_pool` search, held until the MemPool is destroyed
(~MemPool: releasePool, then emptyCache of that pool)."""

from importlib.metadata import version

import pytest

from support.paths import TESTS
from support.allocator_events import replay_events
from support.runs import marked_run_on_h100

from memlens.allocator import replay

MiB = 1 << 20
SCRIPT = TESTS / "scripts" / "cuda_graphs" / "mem_pool.py"

pytestmark = pytest.mark.slow
# torch 2.14's use_mem_pool inside a capture has the capturing graph keep the MemPool's pool
# (CUDAGraph._retain_pool); 2.13's does not, and ~MemPool gives the segment back at once.
_MAJOR_MINOR = tuple(int(p) for p in version("torch").split(".")[:2])
GRAPH_KEEPS_IT = _MAJOR_MINOR >= (2, 14)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    marked, snap, output = marked_run_on_h100(tmp_path_factory.mktemp("mem_pool"), SCRIPT, 2)
    return {name: (allocated, reserved) for name, allocated, reserved in marked}, snap, output


def test_a_mem_pool_holds_its_segments_for_itself(traced):
    """The 3 MiB bucket made in the pool takes a 20 MiB segment of it; x (1 MiB) outside, a
    2 MiB default segment. Freeing the bucket and emptying the cache leaves the pool's segment
    (the MemPool lives). The 2 MiB made in the pool again is carved from it; 3 MiB outside
    cannot use its free 18 MiB: a new 20 MiB segment. Deleting the MemPool gives its segment
    back at once."""
    marks, _, output = traced
    assert marks["made"] == (0, 0)
    assert marks["in_pool"] == (3 * MiB, 20 * MiB)
    assert "POOL_SEGMENTS [20971520]" in output
    assert marks["outside"] == (4 * MiB, 22 * MiB)
    assert marks["freed_and_emptied"] == (1 * MiB, 22 * MiB)
    assert marks["reused"] == (3 * MiB, 22 * MiB)
    assert marks["outside_again"] == (6 * MiB, 42 * MiB)
    assert marks["pool_deleted"] == (4 * MiB, 22 * MiB)


def test_a_mem_pool_used_inside_a_capture(traced):
    """2 MiB made under use_mem_pool inside a capture: a 20 MiB segment of the MemPool's pool
    (the newest routing, taking every stream), not of the graph's. Deleting the MemPool and
    the tensor: on torch 2.14 the graph keeps the pool, whose free segment stays until the graph
    is reset and the cache emptied; on 2.13 it goes with the MemPool."""
    marks, _, _ = traced
    assert marks["captured_in_pool"] == (6 * MiB, 42 * MiB)
    assert marks["mem_pool_gone_graph_keeps_it"] == \
        (4 * MiB, (42 if GRAPH_KEEPS_IT else 22) * MiB)
    assert marks["graph_reset"] == (4 * MiB, 22 * MiB)


def test_the_snapshot_reports_the_pools_and_replays_them(traced):
    """Each pool in the report's private pools: the two MemPools (made at the script's lines
    16 and 39, 20 MiB at their peaks, nothing at the end) and the graph's (empty: its capture
    allocated in the MemPool's). The snapshot's allocation stream with its pool events replays
    to the trace's 42 MiB; so does the first part (the five allocations before the capture),
    which without them would take 22 MiB: the bucket's segment the default pool's, given back
    by the empty_cache, and the later 2 and 3 MiB sharing one segment."""
    _, snap, output = traced
    pools = snap["summary"]["devices"]["cuda:0"]["graph_pools"]
    assert [(p["name"], p["graphs"], p["reserved_peak_bytes"], p["reserved_final_bytes"])
            for p in pools] == [
        (f"MemPool made at {SCRIPT}:16", [], 20 * MiB, 0),
        (f"MemPool made at {SCRIPT}:39", [], 20 * MiB, 0),
        ("graph pool 3", [f"{SCRIPT}:42"], 0, 0)]
    assert snap["summary"]["reserved_peak_bytes"] == 42 * MiB
    kinds = {e["kind"] for e in snap["allocations"]["stream_events"]}
    assert kinds == {"pool_create", "pool_begin", "pool_end", "pool_release", "empty_cache"}
    assert replay(replay_events(snap, kinds)).peak_reserved == 42 * MiB
    assert replay(replay_events(snap, kinds, before=5)).peak_reserved == 42 * MiB
    assert replay(replay_events(snap, {"empty_cache"}, before=5)).peak_reserved == 22 * MiB
    assert "Private pools" in output and "MemPool made at" in output

