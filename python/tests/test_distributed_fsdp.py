"""FSDP2 (`fully_shard`) ranks of an 8-process job, each traced on its own: every rank holds its
own shards, to the byte, and the peak agrees with PyTorch's FSDPMemTracker on the same step.

Scripts: scripts/distributed/fsdp2_train.py (a model of 520,704 parameters whose 1,003-row
embedding and head do not split evenly over 8 ranks, so FSDP pads them)."""

import json
import subprocess
import sys

import pytest

from conftest import TESTS
from support.ranks import (DEVICE, SCRIPTS, allocations_of, model_state_bytes, peak_of,
                           trace_all)

WORLD = 8
SCRIPT = "fsdp2_train.py"
HIDDEN, LAYERS = 128, 2


def shapes(vocab: int) -> list[tuple[int, ...]]:
    """The model's parameters: embedding, per block (LayerNorm, fc1, fc2), head."""
    block = [(HIDDEN,), (HIDDEN,), (4 * HIDDEN, HIDDEN), (4 * HIDDEN,), (HIDDEN, 4 * HIDDEN),
             (HIDDEN,)]
    return [(vocab, HIDDEN), *block * LAYERS, (vocab, HIDDEN)]


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def rows_of(length: int, world: int, rank: int) -> int:
    """torch.chunk's rule, which FSDP follows: chunks of ceil(n / world), the last ones short."""
    size = -(-length // world)
    return max(0, min(size, length - rank * size))


def padded_shard(shape, world: int) -> int:
    """FSDP's padding rule: dim 0 padded to a multiple of the world size, split evenly."""
    return -(-shape[0] // world) * numel(shape[1:])


def local_shard(shape, world: int, rank: int) -> int:
    """The rank's own chunk, unpadded (what DTensor's local tensor, and so Adam's state, holds)."""
    return rows_of(shape[0], world, rank) * numel(shape[1:])


# Adam's `step` counters are scalar tensors kept on the CPU next to GPU parameters, so they add
# to the target device only when the target is the CPU.
STEP_BYTES = 4 * len(shapes(1003)) if DEVICE == "cpu" else 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    names = ["r0", "r7", "r0-noreshard", "r0-zero3"]
    snaps = trace_all(tmp, [(SCRIPT, WORLD, 0), (SCRIPT, WORLD, 7),
                            (SCRIPT, WORLD, 0, "--no-reshard"),
                            (SCRIPT, WORLD, 0, "--bf16", "--vocab", "1024")])
    return dict(zip(names, snaps))


def test_each_rank_holds_its_own_shards_with_fsdp_padding(runs):
    params = shapes(1003)
    assert sum(numel(s) for s in params) == 520_704
    padded = sum(padded_shard(s, WORLD) for s in params)
    assert padded == 65_248  # total / 8 = 65,088, plus 160 elements of padding
    for rank, snap in ((0, runs["r0"]), (7, runs["r7"])):
        states = model_state_bytes(snap)
        # Sharded parameters and gradients are allocated padded, the same on every rank.
        assert states["parameter"] == 4 * padded, rank
        assert states["gradient"] == 4 * padded, rank
        # Adam's exp_avg and exp_avg_sq follow the rank's own (unpadded) chunk: rank 7 holds
        # 121 of the 1,003 rows where ranks 0-6 hold 126.
        local = sum(local_shard(s, WORLD, rank) for s in params)
        assert states["optimizer_state"] == 2 * 4 * local + STEP_BYTES, rank
    assert sum(local_shard(s, WORLD, 7) for s in params) == padded - 2 * 5 * HIDDEN
    assert runs["r7"]["meta"]["parallel"]["role"] == "dp 7/8"
    assert (runs["r7"]["meta"]["world_size"], runs["r7"]["meta"]["rank"]) == (8, 7)


def _line(text: str) -> int:
    lines = (SCRIPTS / SCRIPT).read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def _allocations_at_line(snap, requested: int, line: int, phase: str) -> int:
    """Allocations of `requested` bytes in `phase` whose user frame is `line` of the script."""
    a, frames, stacks = snap["allocations"], snap["frames"], snap["stacks"]
    row = next(p for p in snap["phases"] if p["name"] == phase)
    count = 0
    for i, req in enumerate(a["requested_bytes"]):
        if req != requested or not row["start_seq"] <= a["alloc_seq"][i] < row["end_seq"]:
            continue
        stack = stacks[a["stack"][i]]
        if stack and frames[stack[0]]["line"] == line:
            count += 1
    return count


def test_all_gather_buffers_appear_in_forward_and_backward(runs):
    # One block's flat all-gather output: its padded shard times 8 ranks, fp32. (The block's
    # reduce-scatter input in backward has the same size.)
    block = sum(padded_shard(s, WORLD) for s in shapes(1003)[1:7]) * WORLD * 4
    assert block == 527_872
    assert allocations_of(runs["r0"], block, "forward_backward_iter_1") > 0
    # Forward: gathered in FSDP's pre-forward hook of each block, called at `x = block(x)`.
    forward, backward = _line("x = block(x)"), _line("loss.backward()")
    phase = "forward_backward_iter_1"
    for name in ("r0", "r0-noreshard"):
        assert _allocations_at_line(runs[name], block, forward, phase) == LAYERS, name
    # reshard_after_forward=True frees the blocks after forward and gathers them again in
    # backward; False keeps them until backward.
    again = _allocations_at_line(runs["r0"], block, backward, phase)
    kept = _allocations_at_line(runs["r0-noreshard"], block, backward, phase)
    assert again - kept == LAYERS
    assert runs["r0-noreshard"]["summary"]["peak_bytes"] > runs["r0"]["summary"]["peak_bytes"]


def test_zero3_model_states_are_16_psi_over_nd(runs):
    """Mixed precision (bf16 compute, fp32 sharded parameters, fp32 gradients, Adam): the fp32
    parameters are the master weights, so per rank 4 + 4 + 8 = 16 bytes per parameter over
    Nd ranks, ZeRO-3's 16Ψ/Nd. A 1,024-row vocabulary splits evenly: no padding."""
    psi = sum(numel(s) for s in shapes(1024))
    assert psi == 526_080 and all(s[0] % WORLD == 0 for s in shapes(1024))
    states = model_state_bytes(runs["r0-zero3"])
    assert sum(states.values()) - STEP_BYTES == 16 * psi // WORLD == 1_052_160
    assert states == {"parameter": 4 * psi // WORLD, "gradient": 4 * psi // WORLD,
                      "optimizer_state": 8 * psi // WORLD + STEP_BYTES}


def test_peak_agrees_with_fsdp_mem_tracker(runs):
    """PyTorch's FSDPMemTracker on the same step (same model, same two iterations) under
    FakeTensorMode. It rounds every tensor up to 512 B on a CUDA device and counts no more; the
    CUDA caching allocator model behind memlens' own figure may hand out a whole cached block
    a little larger than that (up to 1 MiB more on the large pool), so we compare like with
    like: memlens' ledger replayed with the tracker's rounding must give exactly its peak, and
    memlens' figure is that or more."""
    out = subprocess.run([sys.executable, str(TESTS / "support" / "fsdp_mem_tracker.py"),
                          str(WORLD), "0", _torch_device(), str(SCRIPTS / SCRIPT)],
                         capture_output=True, text=True, timeout=600,
                         env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    tracker = json.loads(out.stdout.strip().splitlines()[-1])
    snap = runs["r0"]
    rounding = 512 if DEVICE != "cpu" else 1
    ours = peak_of(snap, lambda r: -(-r["requested_bytes"] // rounding) * rounding,
                   after="forward_backward_iter_0")
    # The tracker starts after the model and optimizer are built: compare the training steps.
    train = max(p["peak_bytes"] for p in snap["phases"]
                if p["device"] == snap["meta"]["device_key"] and p["name"] !=
                "setup_model_and_optimizer")
    assert ours == tracker["peak_bytes"]
    assert train >= tracker["peak_bytes"]


def _torch_device() -> str:
    return "cpu" if DEVICE == "cpu" else "cuda:0"


def _env():
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS.parent), env.get("PYTHONPATH"))
                                        if p)
    return env
