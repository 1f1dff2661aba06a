"""CUDA graphs traced: scripts/cuda_graphs/capture_and_replay.py on the H100 target, traced
once. Sizes (fp32): a (512, 1024) activation is 2 MiB, a 1024 x 1024 weight or gradient
4 MiB; a cuBLAS workspace on Hopper is 32 MiB, one per (thread, stream) that ran a matmul.
The allocator rules: a request below 10 MiB on a miss cudaMallocs a 20 MiB segment (and
splits it), 32 MiB is its own segment; a capture allocates from its graph's private pool,
which nothing outside a capture into it reuses (c10/cuda/CUDACachingAllocator.cpp, 2.13)."""

import json
from importlib.metadata import version

import pytest

from support.paths import TESTS
from support.allocator_events import replay_events
from support.runs import marked_run_on_h100, run_memlens

from memlens.allocator import replay
from memlens.reports.memory_viz import memory_viz_snapshot

MiB = 1 << 20
SCRIPT = TESTS / "scripts" / "cuda_graphs" / "capture_and_replay.py"
POOL_KINDS = ("pool_begin", "pool_end", "pool_release", "empty_cache")

pytestmark = pytest.mark.slow

# torch 2.13's make_graphed_callables captures on torch.cuda.graph's own capture stream, whose
# first matmuls (main thread, autograd thread) take two cuBLAS workspaces in the graphs' pool;
# 2.14 captures on the stream it warmed up on, which has them already (torch/cuda/graphs.py).
_MAJOR_MINOR = tuple(int(p) for p in version("torch").split(".")[:2])
W = 64 * MiB if _MAJOR_MINOR < (2, 14) else 0


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    # warm-ups count as iterations (backward passes): leave room for all of them
    marked, snap, output = marked_run_on_h100(tmp_path_factory.mktemp("cuda_graphs"), SCRIPT, 50)
    marks = {name: (allocated, reserved) for name, allocated, reserved in marked}
    marks["refused"] = [line for line in output.splitlines() if line.startswith("REFUSED")]
    return marks, snap, output


def test_capture_allocates_in_the_pool_and_replay_allocates_nothing(traced):
    """Before the capture (after torch.cuda.graph's empty_cache): W1, W2 (4 MiB each), x and
    its gradient (2 MiB each) in one 20 MiB default-stream segment, and the side stream's two
    cuBLAS workspaces (main thread, autograd thread: 2 x 32 MiB): 76 MiB allocated, 84 MiB
    reserved. The capture allocates, on the side stream, h1, a1, y (2 MiB each), grad_a1,
    grad_h1 (2 MiB), grad_W2, grad_W1 (4 MiB): 18 MiB in all, so one 20 MiB pool segment
    holds them whatever the order; y and the two weight gradients stay (10 MiB). Replays
    book nothing (the replay loop's randn temporary fits the default segment's free 8 MiB).
    3 MiB on the side stream afterwards cannot use the pool's free 10 MiB: a new 20 MiB
    segment."""
    marks, _, _ = traced
    assert marks["capture_start"] == (76 * MiB, 84 * MiB)
    assert marks["captured"] == (86 * MiB, 104 * MiB)
    assert marks["replayed"] == (86 * MiB, 104 * MiB)
    assert marks["after_capture_on_side"] == (89 * MiB, 124 * MiB)


def test_graphs_sharing_a_pool_and_their_release(traced):
    """x * 2 (2 MiB) captured: a 20 MiB pool segment; x * 3 with pool=first.pool() is carved
    from it (reserved unchanged); x * 4 in a pool of its own: 20 MiB more. Deleting the first
    graph leaves the pool to the second: empty_cache releases nothing; deleting the second and
    both outputs makes the pool freeable and empty: empty_cache gives its 20 MiB back."""
    marks, _, _ = traced
    assert marks["first_captured"] == (91 * MiB, 144 * MiB)
    assert marks["second_captured_in_first_pool"] == (93 * MiB, 144 * MiB)
    assert marks["third_captured"] == (95 * MiB, 164 * MiB)
    assert marks["first_deleted"] == (95 * MiB, 164 * MiB)
    assert marks["second_deleted"] == (91 * MiB, 144 * MiB)


def test_make_graphed_callables_on_a_module(traced):
    """(The numbers below are torch 2.13's; on 2.14 every figure from the captures on is W =
    64 MiB lower: no workspaces in the pool, see W.)
    A bias-free Linear (4 MiB weight) and its sample input (2 MiB) fit the default segment's
    free 8 MiB: 97 MiB allocated, 144 MiB reserved. make_graphed_callables warms up on a new
    stream: two cuBLAS workspaces there (64 MiB, kept) and a 20 MiB segment for the warm-up's
    output (2 MiB) and weight gradient (4 MiB), still referenced by its locals when the graphs
    are captured (its `del v` loop deletes nothing), so torch.cuda.graph's empty_cache keeps it.
    Captures on torch.cuda.graph's default capture stream, into one pool: the forward's output
    (2 MiB) and the backward's weight gradient (4 MiB) in a 20 MiB segment, and that stream's
    first matmuls' cuBLAS workspaces (main thread, autograd thread) in 32 MiB segments of the
    pool: 84 MiB. The static grad_output (2 MiB, empty_like between the captures, on the
    default stream) takes the default segment's last 2 MiB. Allocated: 97 + 64 + 2 + 32 + 2 +
    4 + 32 = 233 MiB; reserved: 144 + 64 + 20 + 84 = 312 MiB. A step replays both graphs;
    ones_like(out) (2 MiB, freed after backward) needs a new default segment: 332 MiB; the
    weight's .grad is the detached static gradient (AccumulateGrad takes it as is)."""
    marks, _, _ = traced
    assert marks["before_graphed"] == (97 * MiB, 144 * MiB)
    assert marks["graphed"] == (169 * MiB + W, 248 * MiB + W)
    assert marks["graphed_step"] == (169 * MiB + W, 268 * MiB + W)


def test_capture_by_hand_and_reset(traced):
    """capture_begin on the default stream is refused, as in CUDAGraph.cpp. On the side stream:
    x + 1 (2 MiB) in a new pool's 20 MiB segment. reset() and dropping the output make that
    pool freeable and empty; the empty_cache that follows releases it (-20 MiB) and the
    default pools' unused segments: the one ones_like needed on the default stream and the
    make_graphed_callables warm-up stream's (its outputs died with the call): -40 MiB. The
    pools of the graphs still alive stay."""
    marks, _, _ = traced
    assert marks["refused"] == ["REFUSED True"]
    assert marks["manual_captured"] == (171 * MiB + W, 288 * MiB + W)
    assert marks["manual_reset"] == (169 * MiB + W, 228 * MiB + W)


def test_a_stream_that_joins_a_capture_allocates_in_its_pool(traced):
    """joiner waits on the capturing stream inside the capture: x * 5 on joiner (2 MiB) is
    captured into the graph's pool, a 20 MiB segment (see pool 6 below)."""
    marks, _, _ = traced
    assert marks["joined_capture"] == (171 * MiB + W, 248 * MiB + W)


def test_the_snapshot_reports_each_pool(traced):
    """Per pool: its reserved peak and end (pool 2 released above; the others' graphs live to
    the end of the script, whose last event comes before they are collected), its replays
    (3 of the MLP graph; one forward and one backward replay of the graphed module) and the
    lines that captured into it."""
    _, snap, _ = traced
    pools = snap["summary"]["devices"]["cuda:0"]["graph_pools"]
    lines = {p["id"]: [int(g.rsplit(":", 1)[1]) for g in p["graphs"]] for p in pools}
    assert lines == {1: [31], 2: [46, 49], 3: [52], 4: [66, 66], 5: [79], 6: [92]}
    assert {p["id"]: (p["reserved_peak_bytes"], p["reserved_final_bytes"], p["replays"])
            for p in pools} == {1: (20 * MiB, 20 * MiB, 3), 2: (20 * MiB, 0, 0),
                                3: (20 * MiB, 20 * MiB, 0), 4: (20 * MiB + W, 20 * MiB + W, 2),
                                5: (20 * MiB, 0, 1), 6: (20 * MiB, 20 * MiB, 0)}
    assert snap["summary"]["reserved_peak_bytes"] == 288 * MiB + W
    columns = snap["timeline"]["columns"]
    [pool4] = [p for p in snap["timeline"]["pools"] if p["id"] == 4]
    column = columns.index(pool4["column"])
    assert max(point[column] for point in snap["timeline"]["points"]) == 20 * MiB + W


def test_the_terminal_report_lists_the_pools(traced):
    """The rows of the snapshot test above, and how many graphs shared each pool."""
    _, _, stdout = traced
    table = stdout.split("Private pools", 1)[1]
    lines = [line for line in table.splitlines() if " graph pool " in line]
    pool4 = f"{(20 * MiB + W) // MiB}.0"
    # device, "graph", "pool", id, reserved peak, at the end, replays, then the places
    assert [tuple(line.split()[3:9]) for line in lines] == [
        ("1", "20.0", "MiB", "20.0", "MiB", "3"), ("2", "20.0", "MiB", "0", "B", "0"),
        ("3", "20.0", "MiB", "20.0", "MiB", "0"), ("4", pool4, "MiB", pool4, "MiB", "2"),
        ("5", "20.0", "MiB", "0", "B", "1"), ("6", "20.0", "MiB", "20.0", "MiB", "0")]
    assert ["(2 graphs)" in line for line in lines] == [False, True, False, True, False, False]


def test_replaying_the_snapshot_follows_the_pools(traced):
    """(torch 2.13's numbers; W less on 2.14.) The allocation stream with its pool events
    replays to the trace's 352 MiB. Without
    them (empty_cache kept) each capture's blocks are ordinary blocks of its stream: the MLP
    capture's side-stream segment ends with free holes of 2, 4 and 4 MiB (h1 [0,2) freed, y
    takes that hole, gW2 [4,8), grad_a1 [8,10), grad_h1 [10,12), gW1 [12,16) after a1 and
    grad_a1 are freed), so the 3 MiB after it needs no segment (-20 MiB); x * 4 is carved
    from the shared captures' segment (-20 MiB), which x * 4 then keeps (the pool's release
    gave 20 MiB back: +20 MiB), and the graphed module's output and gradient are carved from
    it too (-20 MiB): 292 MiB after the graphed step, its peak (x + 1 fits the MLP capture's
    free 2 MiB hole). At the end: 292 MiB after the empty_cache of section 4, and x * 5's 20 MiB
    segment; the pools of graphs 1, 3, 4 and 6 hold 144 MiB of those 312 MiB; pool 5 is gone."""
    _, snap, _ = traced
    assert replay(replay_events(snap, POOL_KINDS)).peak_reserved == 288 * MiB + W
    assert replay(replay_events(snap, ("empty_cache",))).peak_reserved == 228 * MiB + W
    viz = memory_viz_snapshot(snap)
    by_pool = {}
    for seg in viz["segments"]:
        pool = tuple(seg["segment_pool_id"])[0]
        by_pool[pool] = by_pool.get(pool, 0) + seg["total_size"]
    assert by_pool == {0: 168 * MiB, 1: 20 * MiB, 3: 20 * MiB, 4: 20 * MiB + W, 6: 20 * MiB}


def test_a_trace_stopped_in_the_warm_up_says_where_the_graph_is(tmp_path):
    """With the default 2 iterations the trace stops at the forward after the warm-up's two
    backward passes, inside the first capture, so no capture completes: a note names the
    script's first capture line (30: `graph = torch.cuda.CUDAGraph()`) and the way out."""
    snap_path = tmp_path / "stopped.json"
    out = run_memlens("run", "--device", "h100-80gb", "--progress", "none", "--snapshot",
                      str(snap_path), "--", str(SCRIPT), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    meta = json.loads(snap_path.read_text())["meta"]
    assert meta["stopped_after_iterations"] is True
    [note] = [n for n in meta["notes"] if "CUDA graph" in n]
    assert note.startswith(f"{SCRIPT}:30 captures a CUDA graph, but the trace stopped after 2 "
                           "iteration(s), before a capture completed")
