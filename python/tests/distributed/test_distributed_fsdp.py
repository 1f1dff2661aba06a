"""FSDP2 (`fully_shard`) ranks of an 8-process job, each traced on its own: every rank holds its
own shards, to the byte, and the peak agrees with PyTorch's FSDPMemTracker on the same step.

Scripts: scripts/distributed/fsdp2_train.py (a model of 520,704 parameters whose 1,003-row
embedding and head do not split evenly over 8 ranks, so FSDP pads them)."""

import json
import subprocess
import sys

import pytest

from support.paths import TESTS
from support.ranks import (DEVICE, SCRIPTS, allocations_of, local_shard, model_state_bytes,
                           numel, padded_shard, peak_of, trace_all)

pytestmark = pytest.mark.slow  # traces in fresh processes

WORLD = 8
SCRIPT = "fsdp2_train.py"
HIDDEN, LAYERS = 128, 2


def shapes(vocab: int) -> list[tuple[int, ...]]:
    """The model's parameters: embedding, per block (LayerNorm, fc1, fc2), head."""
    block = [(HIDDEN,), (HIDDEN,), (4 * HIDDEN, HIDDEN), (4 * HIDDEN,), (HIDDEN, 4 * HIDDEN),
             (HIDDEN,)]
    return [(vocab, HIDDEN), *block * LAYERS, (vocab, HIDDEN)]


# Adam's `step` counters are scalar tensors kept on the CPU next to GPU parameters, so they add
# to the target device only when the target is the CPU.
STEP_BYTES = 4 * len(shapes(1003)) if DEVICE == "cpu" else 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    # Rank 7 first saves its shards and AdamW state with torch.distributed.checkpoint.
    plan = {"r0": (SCRIPT, WORLD, 0), "r7": (SCRIPT, WORLD, 7, "--checkpoint", "ckpt"),
            "r0-noreshard": (SCRIPT, WORLD, 0, "--no-reshard"),
            "r0-zero3": (SCRIPT, WORLD, 0, "--bf16", "--vocab", "1024")}
    if DEVICE != "cpu":  # offloading is from a GPU; FSDP1 refuses to run without one
        plan.update({"r0-offload": (SCRIPT, WORLD, 0, "--offload"),
                     "fsdp1-r3": ("fsdp1_train.py", WORLD, 3)})
    return dict(zip(plan, trace_all(tmp, list(plan.values()))))


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


def test_a_sharded_checkpoint_saved_before_training_changes_no_step(runs):
    """DCP's coordinator checks that the ranks' save plans cover each tensor; the simulated
    rank has only its own plan for every rank ("Failed to validate global plan: invalid
    fill"), and async_save writes from a worker thread outside the trace's modes. Rank 7's
    states above are those of a rank that saved; its steps are the usual ones: the step
    `get_optimizer_state_dict` takes to create AdamW's state (zero gradients, lr 0) is none."""
    snap = runs["r7"]
    assert [p["name"] for p in snap["phases"] if p["device"] == "cuda:7"] == [
        "setup_model_and_optimizer", "forward_backward_iter_0", "optimizer_step_iter_0",
        "forward_backward_iter_1", "optimizer_step_iter_1"]


def test_all_gather_buffers_appear_in_forward_and_backward(runs):
    """Each block's flat all-gather output is its padded shard times 8 ranks. With bf16
    mixed precision it is gathered in bf16 and reduced in fp32, so its size is its own: two
    per iteration and block with reshard_after_forward=True (forward, and again in
    backward). In fp32 the block's reduce-scatter input has the same size as its all-gather
    output; counting both, reshard_after_forward=False saves the backward all-gathers."""
    block = sum(padded_shard(s, WORLD) for s in shapes(1003)[1:7]) * WORLD
    assert block == 131_968
    phase = "forward_backward_iter_1"
    assert allocations_of(runs["r0-zero3"], 2 * block, phase) == 2 * LAYERS  # bf16 gathers
    assert allocations_of(runs["r0"], 4 * block, phase) == 3 * LAYERS  # 2 gathers, 1 reduce
    assert allocations_of(runs["r0-noreshard"], 4 * block, phase) == 2 * LAYERS
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
    """PyTorch's FSDPMemTracker on the same step (same model, two iterations, statistics of the
    second) under FakeTensorMode with a fake process group, as its own tests run it.

    Forward and backward agree to the byte once like is compared with like: the tracker rounds
    each tensor to 512 B on a CUDA device and counts nothing else, so memlens' ledger is replayed
    with that rounding (memlens' own figure uses the caching-allocator model, whose blocks can
    be larger) and without the cuBLAS workspaces memlens books as `other` (the CUDA allocator
    holds them; the tracker does not model them).

    The optimizer step is where they part: the tracker's peak there is far higher because
    DTensor computes each op's output metadata by running it on fake tensors of the *global*
    shape in the active fake mode, and the tracker books those probes (with foreach AdamW on a
    GPU, one probe holds every parameter's full-size state: REFERENCES §4's 27x). A real run
    allocates nothing for them; memlens runs them outside its ledger."""
    out = subprocess.run([sys.executable, str(TESTS / "support" / "fsdp_mem_tracker.py"),
                          str(WORLD), "0", _torch_device(), str(SCRIPTS / SCRIPT)],
                         capture_output=True, text=True, timeout=600, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    tracker = json.loads(out.stdout.strip().splitlines()[-1])
    snap = runs["r0"]
    rounding = 512 if DEVICE != "cpu" else 1

    def rounded(r):
        return -(-r["requested_bytes"] // rounding) * rounding

    ours = peak_of(snap, rounded, phases=("forward_backward_iter_1",), without=("other",))
    assert ours == tracker["forward_backward_peak_bytes"]
    step = peak_of(snap, rounded, phases=("optimizer_step_iter_1",), without=("other",))
    if DEVICE != "cpu":  # foreach AdamW: the probes above
        assert tracker["peak_bytes"] > 4 * step
    assert tracker["peak_bytes"] >= max(ours, step)


def _torch_device() -> str:
    return "cpu" if DEVICE == "cpu" else "cuda:0"


def _env():
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS.parent), env.get("PYTHONPATH"))
                                        if p)
    return env


@pytest.mark.skipif(DEVICE == "cpu", reason="offloading is from a GPU to the host")
def test_cpu_offload_keeps_the_sharded_states_on_the_host(runs):
    """CPUOffloadPolicy: sharded parameters (pinned), gradients and Adam's states live in host
    memory; the GPU holds only what is gathered for compute."""
    snap = runs["r0-offload"]
    padded = sum(padded_shard(s, WORLD) for s in shapes(1003))
    local = sum(local_shard(s, WORLD, 0) for s in shapes(1003))
    assert model_state_bytes(snap) == {"parameter": 0, "gradient": 0, "optimizer_state": 0}
    host = model_state_bytes(snap, device="cpu")
    assert host["parameter"] == 4 * padded
    assert host["gradient"] == 4 * padded
    assert host["optimizer_state"] == 2 * 4 * local + 4 * len(shapes(1003))  # + CPU steps
    assert snap["summary"]["devices"]["cpu"]["peak_bytes"] > 4 * 4 * padded
    assert snap["summary"]["peak_bytes"] < runs["r0"]["summary"]["peak_bytes"]


@pytest.mark.skipif(DEVICE == "cpu", reason="FSDP1 needs an accelerator device")
def test_fsdp1_flat_parameters_are_padded_to_equal_shards(runs):
    """FSDP1 flattens each wrapped module's parameters into one FlatParameter, padded to a
    multiple of the world size: here the root's (embedding and head, 256,768) and each block's
    (131,968) split evenly, 65,088 elements per rank = 520,704 / 8, on every rank."""
    snap = runs["fsdp1-r3"]
    per_rank = (2 * 1003 * HIDDEN + LAYERS * 131_968) // WORLD
    assert per_rank == 65_088 == 520_704 // WORLD
    states = model_state_bytes(snap)
    assert states == {"parameter": 4 * per_rank, "gradient": 4 * per_rank,
                      "optimizer_state": 2 * 4 * per_rank}
    assert snap["meta"]["parallel"]["role"] == "dp 3/8"
