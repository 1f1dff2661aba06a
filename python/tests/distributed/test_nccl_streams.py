"""c10d collectives on ProcessGroupNCCL's streams, as PyTorch 2.13 runs them
(torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp; the rules: memlens/kernels/nccl_work.py).

Scripts: scripts/distributed/nccl_async.py (a 3 MiB tensor reduced or sent, dropped before the
wait, an 18 MiB buffer allocated before the wait), ddp_comm_hook.py (DDP over 2 ranks with and
without fp16_compress_hook).

Allocator arithmetic (c10/cuda/CUDACachingAllocator.cpp): 3 MiB and 18 MiB are > 1 MiB (large
pool). 3 MiB < 10 MiB takes a 20 MiB segment (kLargeBuffer) and is split from it, leaving a
17 MiB free remainder; 18 MiB >= 10 MiB asks for exactly 18 MiB (rounded to 2 MiB) and fits in a
free 20 MiB block (split, remainder 2 MiB > 1 MiB), not in the 17 MiB remainder."""

import json
import uuid

import pytest

from support.ranks import SCRIPTS
from support.runs import run_memlens

from memlens.allocator import replay

pytestmark = pytest.mark.slow  # traces in fresh processes
MiB = 1 << 20


def run(tmp, script, *args, env=None):
    snap = tmp / f"{script}-{uuid.uuid4().hex[:8]}.json"
    out = run_memlens("run", "--device", "h100-80gb", "--world-size", "2", "--rank", "0",
                      "--progress", "none", "--snapshot", str(snap), "--",
                      str(SCRIPTS / script), *args, cwd=tmp, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    printed = [line for line in out.stdout.splitlines() if line.startswith("allocated ")]
    return json.loads(snap.read_text()), printed


def test_an_async_all_reduce_keeps_its_dropped_tensor_until_the_wait(tmp_path):
    # async_op=True: the work stashes the 3 MiB tensor (stashed_for_allocator_safety_) until
    # work.wait(), so `del` frees nothing: the 18 MiB buffer finds the 20 MiB segment's only
    # free block, 17 MiB, too small, and takes an 18 MiB segment: reserved 20 + 18 = 38 MiB,
    # allocated 3 + 18 = 21 MiB. After the wait the script still holds `handle`, whose
    # `outputs_` (and its future's value) is the tensor: still 21 MiB allocated.
    snap, printed = run(tmp_path, "nccl_async.py")
    assert snap["summary"]["reserved_peak_bytes"] == 38 * MiB
    assert snap["summary"]["peak_bytes"] == 21 * MiB
    assert printed == [f"allocated {21 * MiB} reserved {38 * MiB}"]
    # The collective ran on the default group's NCCL stream; nothing was allocated there
    # (the tensor is on the default stream) and no recordStream was made.
    assert snap["allocations"]["stream_names"] == {"1": "nccl:default"}
    assert set(snap["allocations"]["stream"]) == {0}
    assert snap["allocations"]["stream_events"] == []


def test_avoid_record_streams_is_the_default_and_changes_nothing(tmp_path):
    # "TORCH_NCCL_AVOID_RECORD_STREAMS is the default now, this environment variable is thus
    # deprecated": the same 38 MiB.
    snap, printed = run(tmp_path, "nccl_async.py", env={"TORCH_NCCL_AVOID_RECORD_STREAMS": "1"})
    assert snap["summary"]["reserved_peak_bytes"] == 38 * MiB
    assert printed == [f"allocated {21 * MiB} reserved {38 * MiB}"]


def test_a_sync_all_reduce_runs_on_the_current_stream_and_holds_nothing(tmp_path):
    # async_op=False: enqueued on the current stream, no work, nothing stashed: `del` frees the
    # 3 MiB block, the whole 20 MiB block is free again and the 18 MiB buffer splits it:
    # reserved 20 MiB, allocated at most 18 MiB. No NCCL stream was used.
    snap, printed = run(tmp_path, "nccl_async.py", "--sync")
    assert snap["summary"]["reserved_peak_bytes"] == 20 * MiB
    assert snap["summary"]["peak_bytes"] == 18 * MiB
    assert printed == [f"allocated {18 * MiB} reserved {20 * MiB}"]
    assert snap["allocations"]["stream_names"] == {}


def test_an_isend_records_its_tensor_on_the_pair_stream(tmp_path):
    # pointToPoint: an unbatched isend to rank 1 gets the 2-rank communicator "0:1" and its
    # stream, and recordStream(tensor, ncclStream); nothing is stashed, but the work's
    # outputs_ holds the tensor: `del` frees nothing, the 18 MiB buffer takes its own segment:
    # reserved 38 MiB, allocated 21 MiB. At work.wait() the default stream waits for the
    # send, then the handle lets go: 18 MiB allocated after. That free, of a block used on the
    # pair stream, comes after the wait, so the block waits for the next synchronisation
    # (none in this script; the wait found no block waiting and is not listed).
    snap, printed = run(tmp_path, "nccl_async.py", "--op", "isend")
    assert snap["summary"]["reserved_peak_bytes"] == 38 * MiB
    assert snap["summary"]["peak_bytes"] == 21 * MiB
    assert printed == [f"allocated {18 * MiB} reserved {38 * MiB}"]
    assert snap["allocations"]["stream_names"] == {"1": "nccl:default p2p 0:1"}
    events = snap["allocations"]["stream_events"]
    assert [(e["kind"], e["stream"]) for e in events] == [("record_stream", 1)]


def ddp_events(snap, release_early=None):
    """cuda:0's allocation stream for allocator.replay; `release_early` (allocation, after)
    moves that allocation's free to right after allocation event `after`."""
    a = snap["allocations"]
    order = []
    for i in range(len(a["bytes"])):
        order.append((a["alloc_seq"][i], ("alloc", i, a["requested_bytes"][i], 0)))
        free = a["free_seq"][i]
        if release_early and release_early[0] == i:
            free = release_early[1] + 0.5
        if free >= 0:
            order.append((free, ("free", i, 0, 0)))
    return [e for _, e in sorted(order, key=lambda p: p[0])]


def test_ddp_fp16_hook_keeps_each_compressed_bucket_until_the_next_all_reduce(tmp_path):
    """fp16_compress_hook: compressed = bucket.to(fp16) (64 MiB of the 128 MiB bucket, on the
    default stream), all_reduce(compressed, async_op=True), fut.then(decompress). Nobody waits
    for that work (DDP waits for the future), so the stash keeps `compressed` until the
    watchdog has seen the work complete and the group's next enqueue unstashes it: the next
    iteration's all-reduce. Iteration 2's compressed copy is allocated while iteration 1's is
    still held (it is freed only when iteration 2's all-reduce is issued), and iteration 2's
    copy is still alive when the trace ends. The step's reserved peak is the no-hook step's
    578 MiB plus one 64 MiB copy (>= 10 MiB: a segment of exactly 64 MiB): 642 MiB. Freeing
    iteration 1's copy before iteration 2's is made (a replay with that free moved) gives the
    same 642 MiB: the peak falls where one copy is alive either way; the stash moves frees,
    not this step's peak."""
    (none, _), (fp16, _) = run(tmp_path, "ddp_comm_hook.py"), \
        run(tmp_path, "ddp_comm_hook.py", "--hook", "fp16")
    a = fp16["allocations"]
    ops = fp16["ops"]
    copies = [i for i in range(len(a["bytes"]))
              if ops[a["op"][i]] == "_to_copy" and a["category"][i] == 5]
    assert [a["bytes"][i] for i in copies] == [64 * MiB, 64 * MiB]
    first, second = copies
    # freed right after the second copy's all-reduce was issued, never before it was made
    assert a["free_seq"][first] > a["alloc_seq"][second]
    assert a["free_seq"][second] == -1  # held into the next iteration: alive at the end
    assert none["summary"]["reserved_peak_bytes"] == 578 * MiB
    assert fp16["summary"]["reserved_peak_bytes"] == 642 * MiB == 578 * MiB + 64 * MiB
    assert replay(ddp_events(fp16)).peak_reserved == 642 * MiB
    early = replay(ddp_events(fp16, (first, a["alloc_seq"][second] - 1))).peak_reserved
    assert early == 642 * MiB
    # Both runs' buckets all-reduce on the default group's stream.
    assert fp16["allocations"]["stream_names"] == none["allocations"]["stream_names"] == {
        "1": "nccl:default"}


def test_a_functional_collective_runs_on_the_group_stream_and_is_waited_at_once(tmp_path):
    # funcol.all_reduce calls the group with asyncOp=true (the default group's NCCL stream,
    # input and output stashed until wait_tensor). Under any fake mode funcol waits at once
    # (_maybe_wrap_tensor: "if fake mode is turned on, we are almost definitely compiling"),
    # so in a trace the stash ends inside the call: `del` frees the 12 MiB input (>= 10 MiB:
    # its own segment) and the 12 MiB buffer reuses it: 12 + 12 = 24 MiB reserved. (On a GPU
    # the AsyncCollectiveTensor would wait at its first use, after the buffer: 36 MiB.)
    snap, printed = run(tmp_path, "funcol_async.py")
    assert snap["summary"]["reserved_peak_bytes"] == 24 * MiB
    assert printed == [f"allocated {24 * MiB} reserved {24 * MiB}"]
    assert snap["allocations"]["stream_names"] == {"1": "nccl:default"}
