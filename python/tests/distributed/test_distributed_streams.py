"""Streams and NCCL on simulated GPU jobs: where FSDP2 puts its buffers, what that does to
reserved memory, and the rows next to the allocator's memory (NCCL per communicator, cuBLAS per
stream).

Scripts: scripts/distributed/fsdp2_streams.py (two 4096 x 4096 fp32 linear layers, each its own
FSDP2 unit over 2 ranks: 64 MiB unsharded, 32 MiB shards, activations in the small pool),
fsdp_tp_train.py (dp 4 x tp 2), pp_train.py (4 pipeline stages), nccl_bringup.py (DDP and a
metrics group), scripts/cuda_streams.py."""

import json

import pytest

from support.paths import TESTS
from support.ranks import trace_all
from support.runs import run_memlens

from memlens.allocator import replay
from memlens.allocator.nccl import Communicator, communicator_bytes

pytestmark = pytest.mark.slow  # traces in fresh processes
MiB = 1 << 20


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("streams")
    plan = {"fsdp": ("fsdp2_streams.py", 2, 0, "--layers", "2"),
            "fsdp_tp": ("fsdp_tp_train.py", 8, 0, "--tp", "2"),
            "pp": ("pp_train.py", 4, 1),
            "ddp": ("nccl_bringup.py", 4, 0)}
    return dict(zip(plan, trace_all(tmp, list(plan.values()), device="h100-80gb")))


def events(snap, stream=lambda s: s, kinds=()):
    """cuda:0's allocation stream in the snapshot, as allocator.replay takes it (streams
    mapped by `stream`), with the stream events of `kinds` ("record_stream", "wait") at their
    places."""
    a = snap["allocations"]
    device = a["devices"].index("cuda:0")
    order = []
    for i in range(len(a["bytes"])):
        if a["device"][i] != device:
            continue
        order.append((a["alloc_seq"][i], ("alloc", i, a["requested_bytes"][i],
                                          stream(a["stream"][i]))))
        if a["free_seq"][i] >= 0:
            order.append((a["free_seq"][i], ("free", i, 0, stream(a["stream"][i]))))
    for e in a["stream_events"]:  # each after the allocation event `seq`
        if e["kind"] in kinds:
            step = ("record_stream", e["allocation"], 0, e["stream"]) \
                if e["kind"] == "record_stream" else ("wait", e["waiter"], e["marker"], e["stream"])
            order.append((e["seq"] + 0.5, step))
    return [e for _, e in sorted(order, key=lambda pair: pair[0])]


def large(snap, category, nbytes):
    a = snap["allocations"]
    cat = ["parameter", "buffer", "gradient", "optimizer_state", "activation", "temporary",
           "input", "other"].index(category)
    return [a["stream"][i] for i in range(len(a["bytes"]))
            if a["category"][i] == cat and a["bytes"][i] == nbytes]


def test_fsdp2_buffers_live_on_their_streams(runs):
    snap = runs["fsdp"]
    # FSDP2 allocates the all-gather output under its all-gather copy-in stream and the
    # reduce-scatter output (the sharded gradient) under its reduce-scatter stream: one
    # 64 MiB all-gather output per layer and pass (forward, and backward with
    # reshard_after_forward), two iterations: 8; one 32 MiB reduce-scatter output per layer
    # and iteration: 4.
    # The reduce-scatter inputs, 64 MiB temporaries too (one per layer and iteration), are
    # allocated on the default stream.
    temporaries = large(snap, "temporary", 64 * MiB)
    reduced = large(snap, "gradient", 32 * MiB)
    ag_stream, rs_stream = temporaries[0], reduced[0]
    assert sorted(temporaries) == [0] * 4 + [ag_stream] * 8
    assert reduced == [rs_stream] * 4
    assert 0 not in (ag_stream, rs_stream) and ag_stream != rs_stream
    # Everything else (parameters, unsharded gradients, cuBLAS workspaces) is on stream 0.
    a = snap["allocations"]
    assert {a["stream"][i] for i in range(len(a["bytes"]))} == {0, ag_stream, rs_stream}


def test_fsdp2_reserved_memory_with_streams_and_with_one_pool(runs):
    """Reserved memory as the caching allocator's per-stream pools make it, worked out from the
    step's large blocks with get_free_block's (stream, size) key. 64 and 32 MiB are >= 10 MiB:
    a miss cudaMallocs exactly that; a cached 64 MiB block serves a 32 MiB request by
    splitting (the 32 MiB rest is > 1 MiB). Plus one 2 MiB small-pool segment (activations).
    Per layer 0/1: W full weight, P shard, G all-gather output (all-gather copy-in stream), U
    unsharded parameter, K cuBLAS workspace, D unsharded gradient, R reduce-scatter input, O
    reduce-scatter output (reduce-scatter stream); the rest on the default stream. Segments
    a, b, ... in the order they are made.

    Streams. Setup: W0 a64, W1 b64, P0 c32, W0 freed, P1 splits a, W1 freed. Forward: G0 finds
    its stream's pool empty: d64; U0 b; K a's rest; U0 freed; G1 (d in use) e64; U1 b; all
    freed. Backward: G1 d, U1 b, G1 freed, G0 d (prefetch), D1 (nothing free on the default
    stream) f64, K g32, U1 freed, R1 b, O1 (its stream's pool empty) h32, D1 freed, U0 f,
    G0 freed, D0 i64, U0 and R1 freed, R0 b, O0 (h in use) j32. The second iteration finds a
    cached block for each request: 6 x 64 + 4 x 32 = 512 MiB, +2 = 514 MiB.

    One pool. Setup as above. Forward: G0 b, U0 d64, K a's rest, U0 freed, G1 d, U1 e64, all
    freed. Backward: G1 b, U1 d, G1 freed, G0 b, D1 e, K f32, U1 freed, R1 d, O1 g32, D1 freed,
    U0 e, G0 freed, D0 b, U0 and R1 freed, R0 d, O0 splits e: 4 x 64 + 3 x 32 = 352 MiB,
    +2 = 354 MiB.

    Streams, but O on the default stream. As with streams up to O1, which finds the default
    pool empty: h32; D1 freed, U0 f, D0 i64, U0 and R1 freed, R0 b, and O0 splits f instead of
    taking a new j32: 480 + 2 = 482 MiB. The reduce-scatter stream's own pool costs 32 MiB,
    the all-gather stream's d and e (which one pool shares with U, D and R) 128 MiB."""
    snap = runs["fsdp"]
    assert snap["summary"]["reserved_peak_bytes"] == 514 * MiB
    ag = large(snap, "temporary", 64 * MiB)[0]  # the first is forward's all-gather output
    rs = large(snap, "gradient", 32 * MiB)[0]
    assert replay(events(snap)).peak_reserved == 514 * MiB  # the snapshot replays the same
    assert replay(events(snap, lambda s: 0)).peak_reserved == 354 * MiB
    assert replay(events(snap, lambda s: 0 if s == rs else s)).peak_reserved == 482 * MiB
    assert 514 * MiB - 354 * MiB == 160 * MiB == 32 * MiB + 128 * MiB
    assert ag != rs


def reserved_series(snap):
    """The timeline's reserved columns: {stream name: [bytes per point]}, and the total."""
    t = snap["timeline"]
    column = {c: i for i, c in enumerate(t["columns"])}
    per_stream = {s["name"]: [p[column[s["column"]]] for p in t["points"]] for s in t["streams"]}
    return per_stream, [p[column["reserved"]] for p in t["points"]]


def test_fsdp2_reserved_memory_per_stream_on_the_timeline(runs):
    """The segments of the test above by the stream whose pool made them. Default stream:
    a64 b64 c32 f64 g32 i64 and the 2 MiB small-pool segment = 322 MiB; all-gather copy-in
    stream: d64 e64 = 128 MiB; reduce-scatter stream: h32 j32 = 64 MiB; 514 MiB in all. Nothing
    is released, so each series only grows and ends there; the all-gather stream's first
    segment (d, forward's first all-gather) comes before the reduce-scatter stream's (h, in
    backward)."""
    snap = runs["fsdp"]
    per_stream, total = reserved_series(snap)
    assert [s["name"] for s in snap["timeline"]["streams"]] == [
        "default stream", "all_gather_copy_in_stream", "reduce_scatter_stream"]
    assert {name: series[-1] for name, series in per_stream.items()} == {
        "default stream": 322 * MiB, "all_gather_copy_in_stream": 128 * MiB,
        "reduce_scatter_stream": 64 * MiB}
    assert total[-1] == 514 * MiB == snap["summary"]["reserved_peak_bytes"]
    for i, reserved in enumerate(total):
        assert sum(series[i] for series in per_stream.values()) == reserved
    for series in (*per_stream.values(), total):
        assert series == sorted(series)
    first = {name: next(i for i, b in enumerate(series) if b) for name, series in
             per_stream.items()}
    assert first["all_gather_copy_in_stream"] < first["reduce_scatter_stream"]
    # The streams are named where FSDP2 makes them (its param group's lazy_init).
    ag, rs = large(snap, "temporary", 64 * MiB)[0], large(snap, "gradient", 32 * MiB)[0]
    ids = {s["name"]: s["id"] for s in snap["timeline"]["streams"]}
    assert (ids["all_gather_copy_in_stream"], ids["reduce_scatter_stream"]) == (ag, rs)
    places = {s["name"]: s["place"] for s in snap["timeline"]["streams"]}
    assert places["default stream"] is None
    assert "_fsdp_param_group.py:" in places["reduce_scatter_stream"]


def nccl_rows(snap):
    return {row["label"]: row for row in snap["summary"]["outside_allocator"]
            if row["label"].startswith("NCCL")}


def test_an_fsdp2_job_has_an_nccl_row_for_its_group(runs):
    # One communicator (the default group of 2 ranks) ran all-gathers and reduce-scatters:
    # ring connections on 16 channels (NVLink card) x (receiving 10 MiB + sending 2 MiB).
    [(label, row)] = nccl_rows(runs["fsdp"]).items()
    assert label == "NCCL buffers (default, 2 ranks)"
    assert row["bytes"] == 16 * (10 + 2) * MiB == 192 * MiB
    assert row["bytes"] == communicator_bytes(Communicator("default", 2, ring=True),
                                              "h100-80gb", (9, 0), env={})[0]
    assert row["counted_by_allocator"] is False
    summary = runs["fsdp"]["summary"]
    outside = sum(r["bytes"] for r in summary["outside_allocator"]
                  if not r["counted_by_allocator"])
    assert summary["outside_allocator_bytes"] == outside == 512 * MiB + 192 * MiB


def test_a_ddp_job_has_a_row_for_each_group_it_used(runs):
    # DDP's gradient all-reduces (and barriers) on the default group, the metric all-reduce on
    # a group made with new_group (no description: named by its id): two communicators,
    # 16 ring channels x 12 MiB each.
    rows = nccl_rows(runs["ddp"])
    assert {k: v["bytes"] for k, v in rows.items()} == {
        "NCCL buffers (default, 4 ranks)": 192 * MiB, "NCCL buffers (group 1, 4 ranks)": 192 * MiB}
    assert all("ring: 16 channels x (recv 10,485,760 + send 2,097,152 B)" in v["basis"]
               for v in rows.values())


def test_a_2d_job_has_one_nccl_row_per_communicator(runs):
    # dp 4 x tp 2: the tensor-parallel group (2 ranks) and the data-parallel group (4 ranks)
    # each ran collectives: 192 MiB each, whatever their size (a ring has two neighbours).
    rows = nccl_rows(runs["fsdp_tp"])
    assert {k: v["bytes"] for k, v in rows.items()} == {
        "NCCL buffers (mesh_tp, 2 ranks)": 192 * MiB, "NCCL buffers (mesh_dp, 4 ranks)": 192 * MiB}


def test_a_pipeline_stage_has_p2p_connections_to_both_neighbours(runs):
    # Stage 1 of 4 receives activations from 0 and gradients from 2, and sends to both:
    # 16 p2p channels x (2 receiving x 10 MiB + 2 sending x 2 MiB) = 384 MiB.
    [(label, row)] = nccl_rows(runs["pp"]).items()
    assert label == "NCCL buffers (default, 4 ranks)"
    assert row["bytes"] == 16 * (2 * 10 + 2 * 2) * MiB == 384 * MiB


def test_streams_events_and_cublas_per_stream(tmp_path):
    """scripts/cuda_streams.py, 12 MiB blocks (one segment each):
    a on side, freed; b (default) cannot take it: 24 MiB; c (side) does: 24 MiB.
    d recorded on side and freed: e (default) takes a new segment: 48 MiB; after
    wait_stream(side), f reuses d's block: 48 MiB. g freed after an event recorded before its
    free: wait_event(early) does not free it, h is new: 72 MiB; late.synchronize() does, i
    reuses it: 72 MiB. A matmul on side: a 2 MiB small segment of side for w and w @ w, and a
    cuBLAS workspace for (main thread, side), 32 MiB: 106 MiB; the same matmul on the default
    stream: a small segment and a workspace of the default stream's own: 140 MiB."""
    snap_path = tmp_path / "streams.json"
    out = run_memlens("run", "--device", "h100-80gb", "--progress", "none", "--snapshot",
                      str(snap_path), "--", str(TESTS / "scripts" / "cuda_streams.py"),
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    marks = {line.split()[1]: int(line.split()[2]) for line in out.stdout.splitlines()
             if line.startswith("MARK ")}
    assert marks == {"default_after_side_free": 24 * MiB, "side_reuses_its_block": 24 * MiB,
                     "after_record_stream_free": 48 * MiB, "after_wait_stream": 48 * MiB,
                     "after_early_event": 72 * MiB, "after_late_event": 72 * MiB,
                     "after_side_matmul": 106 * MiB, "after_default_matmul": 140 * MiB}
    snap = json.loads(snap_path.read_text())
    rows = {r["label"]: r["bytes"] for r in snap["summary"]["outside_allocator"]
            if r["label"].startswith("cuBLAS")}
    assert rows == {"cuBLAS workspace x1": 32 * MiB, "cuBLAS workspace x1 (stream 1)": 32 * MiB}
    kinds = [e["kind"] for e in snap["allocations"]["stream_events"]]
    # record_stream of d and g; the waits that found a block waiting: wait_stream, the early
    # wait_event, late.synchronize (the first wait_stream and the rest had nothing to free)
    assert kinds == ["record_stream", "wait", "record_stream", "wait", "wait"]
    both = ("record_stream", "wait")
    assert replay(events(snap, kinds=both)).peak_reserved == 140 * MiB
    # Without the waits the two recorded blocks never come back: f and i are new: 164 MiB.
    assert replay(events(snap, kinds=("record_stream",))).peak_reserved == 164 * MiB

    # Reserved per stream on the timeline (every event is a point in so short a trace), each
    # change: a (side) 12; b, d, e, g, h (default) one 12 MiB segment each; the side matmul's
    # 2 MiB small segment (w) and its 32 MiB cuBLAS workspace; the default one's the same.
    # The default stream ends at 5 x 12 + 2 + 32 = 94 MiB, side at 12 + 2 + 32 = 46 MiB.
    per_stream, total = reserved_series(snap)
    assert [(s["id"], s["name"]) for s in snap["timeline"]["streams"]] == [
        (0, "default stream"), (1, "side")]
    assert snap["timeline"]["streams"][1]["place"].endswith("cuda_streams.py:18")
    steps = sorted({(d // MiB, s // MiB) for d, s in
                    zip(per_stream["default stream"], per_stream["side"])})
    assert steps == [(0, 12), (12, 12), (24, 12), (36, 12), (48, 12), (60, 12), (60, 14),
                     (60, 46), (62, 46), (94, 46)]
    assert [d + s for d, s in zip(per_stream["default stream"], per_stream["side"])] == total
    assert max(total) == 140 * MiB
