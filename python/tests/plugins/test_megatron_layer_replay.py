"""Layer replay in Megatron jobs (engine/layer_replay.py): Megatron's DDP hooks are declared
(plugins/megatron/ddp_hooks.py), and its tensor-parallel collectives are noted among a block's
operations and done again for a replayed block (kernels/nccl_work.py), so a rank's identical
transformer layers are replayed, and the snapshot is the full trace's, field by field.

gpt_core_train.py with 6 layers on the last rank, 2 steps: layers 2 and 3 replayed in the first
pass, forward and backward, 1 to 3 in the second (the recording matched a traced layer once);
with two micro-batches a step, 1 to 4 from the third (twice: layer_groups.Pass), and the first
or last layer too where it matched the recordings in the second."""

import pytest

from support.megatron import NEEDS, SCRIPT
from support.snapshot_pairs import differences, pair, trace
from support.paths import TESTS

pytestmark = [pytest.mark.slow, NEEDS]

DDP = TESTS / "scripts" / "distributed" / "ddp_train.py"


def job(world: int, rank: int | None = None) -> tuple[str, ...]:
    """The last rank, unless `rank`."""
    return ("--device", "h100-80gb", "--world-size", str(world),
            "--rank", str(world - 1 if rank is None else rank))


# (name, world size, rank (None: the last), script arguments, forward replays, backward
# replays)
REPLAYED = [
    # The row-parallel layers' synchronous all-reduce in forward; the column-parallel layers'
    # asynchronous all-reduce of the input gradient in backward, waited for after the weight
    # gradient's GEMM; DDP's hook on each parameter.
    ("tp2", 2, None, ("--tp", "2"), 5, 5),
    # Sequence parallelism: all-gathers and reduce-scatters into Megatron's global buffer, in
    # backward asynchronous; DDP's hooks mark each parameter ready, and a complete bucket
    # starts its reduce-scatter on the data-parallel group's stream.
    ("sp-overlap", 4, None, ("--tp", "2", "--sp", "--distributed-optimizer",
                             "--overlap-grad-reduce"), 5, 5),
    # The last pipeline stage (5 layers), 2 micro-batches a step, each forward followed by its
    # backward: layer 2 replayed, then 1 and 2, then 1 to 4 in the two passes after (11: the
    # first layer's backward, whose input comes from the stage before, is not the others'). The
    # stages' sends record their tensors on the NCCL streams, so the allocator has events to
    # wait for: the replayed layers' stream waits for their collectives count here.
    ("pp2", 4, None, ("--tp", "2", "--pp", "2", "--layers", "10"), 11, 11),
    # The first of 4 stages (5 layers), 6 micro-batches: it calls the first 3 forwards from the
    # schedule's warm-up loop, before any backward, and the others from its steady loop, each
    # after a backward: two programs (layer_groups.Program), each recorded (layer 2 replayed),
    # checked (1 and 2), then trusted (1 to 3) in step 1, its passes' backwards confirmed in
    # the same order when they run; trusted in step 2, with one of the first and last layers,
    # which matched the recordings in the checked passes: 6 + 6 + 6 x 4.
    ("pp4-first", 4, 0, ("--pp", "4", "--layers", "20", "--microbatches", "6"), 36, 36),
    # TE's layers with gradient accumulation fusion: the weight gradient is added to main_grad
    # in backward, and each parameter is handed TE's one dummy gradient, a buffer outside the
    # layers, which DDP's hook drops.
    ("te-fusion", 2, None, ("--tp", "2", "--spec", "te", "--grad-accum-fusion"), 5, 5),
]


@pytest.mark.parametrize("name,world,rank,args,forward,backward", REPLAYED,
                         ids=[r[0] for r in REPLAYED])
def test_a_megatron_rank_replays_its_layers_with_the_full_traces_snapshot(
        tmp_path, name, world, rank, args, forward, backward):
    replayed, full = pair(tmp_path, name, SCRIPT, "--layers", "6", *args, "--steps", "2",
                          flags=job(world, rank))
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "module.module.decoder.layers",
                                     "blocks": 5 if "--pp" in args else 6}],
        "replayed_forward": forward, "replayed_backward": backward}


def test_megatrons_selective_recompute_inside_a_layer_traces_it_in_full(tmp_path):
    """Megatron's checkpoint of core attention, inside the layer, saves the CPU's RNG state:
    a host value a replayed layer would not have."""
    snap = trace(tmp_path, "selective", SCRIPT, "--layers", "6", "--tp", "2", "--recompute",
                 "selective", "--steps", "1", flags=job(2))
    assert snap["meta"]["layer_replay"]["groups"] == [{
        "module": "module.module.decoder.layers", "blocks": 6,
        "traced_in_full": "its forward makes host values, notes, streams, collectives or "
                          "shared buffers"}]


def test_megatrons_full_recompute_traces_its_layers_in_full_with_the_same_snapshot(tmp_path):
    """Full recompute runs each layer's first forward under no_grad inside Megatron's
    checkpoint: its dropout masks outlive the layer's call, kept by nothing a replay knows (no
    backward will free them). Replayed, they were never freed (found by Megatron's CI case
    gpt3_mcore_te_tp1_pp1_resume_torch_dist_uniform_full_recompute, +2.7 % peak)."""
    replayed, full = pair(tmp_path, "full-recompute", SCRIPT, "--layers", "6", "--tp", "2",
                          "--recompute", "full", "--steps", "2", flags=job(2))
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"]["groups"] == [{
        "module": "module.module.decoder.layers", "blocks": 6,
        "traced_in_full": "its forward makes memory it keeps outside autograd (`native_dropout`, "
                          "bool [128, 2, 256])"}]


def test_torch_ddp_keeps_layer_replay_off(tmp_path):
    """DDP's reducer hooks each parameter's gradient accumulator in C++: a replayed block's
    parameters would never be marked ready."""
    snap = trace(tmp_path, "ddp", DDP, "--layers", "6", "--steps", "1", flags=job(2))
    assert snap["meta"]["layer_replay"]["off"].startswith(
        "a distributed job whose gradient hooks memlens does not know")
