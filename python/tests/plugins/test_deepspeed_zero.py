"""DeepSpeed ZeRO traced unmodified (scripts/deepspeed/zero_mlp.py: `deepspeed.initialize`,
`model_engine(x)`, `model_engine.backward(loss)`, `model_engine.step()`), on a simulated H100,
single GPU and as rank 0 of 4, bf16 and fp16 with DeepSpeed's FusedAdam (AdamW), and with the
optimizer offloaded to the host (DeepSpeedCPUAdam).

The model states are read when the inner optimizer's second step begins (the phase
`optimizer_step_iter_1`: gradients reduced, states made) and compared with ZeRO's accounting
for mixed-precision Adam, Ψ parameters, N ranks, derived here from the model and the config:

    ZeRO paper, bytes per rank   parameters   gradients    optimizer state (fp32 copy, m, v)
    no ZeRO (stage 0)            2Ψ           2Ψ           12Ψ
    stage 1                      2Ψ           2Ψ           12Ψ/N
    stage 2                      2Ψ           2Ψ/N         12Ψ/N
    stage 3                      2Ψ/N         2Ψ/N         12Ψ/N

What DeepSpeed 0.19 holds besides, each term derived below from its sources:
- stage 1/2 flatten the 16-bit parameters into one buffer padded to a multiple of
  2N elements (stage_1_and_2.py: nccl_start_alignment_factor 2 x world size) and give each
  rank 1/N of it; stage 3 pads each parameter to a multiple of N and gives each rank
  ceil(numel / N) of it (partition_parameters.py `_padding_size`);
- when the inner optimizer steps, the master partition's gradient is fp32 (4 bytes per
  partitioned parameter: stage 1/2 `single_partition_of_fp32_groups[i].grad`, stage 3
  `fp32_partitioned_groups_flat[i].grad`) and the 16-bit gradients reduced into it are gone
  (stage 1/2) or still held (stage 3's flat buffer of 16-bit gradient partitions, 2 bytes
  each, next to its reduce bucket of `reduce_bucket_size` 16-bit elements).
"""

from __future__ import annotations

import json
import math
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from support.paths import TESTS
from support.ranks import _rows, live_requested, phase_start
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "deepspeed" / "zero_mlp.py"
DEVICE = "h100-80gb"
# zero_mlp.py: 4 x Linear(512, 512) and Linear(512, 10); BUCKET elements per ZeRO bucket.
SHAPES = [512 * 512, 512] * 4 + [512 * 10, 10]
PSI = sum(SHAPES)
BUCKET = 131_072
LARGEST = 512 * 512
STEP = "optimizer_step_iter_1"

LAUNCH = TESTS / "scripts" / "deepspeed" / "launch_zero3.sh"  # deepspeed --num_gpus 4 ...
RUNS = {  # name: (world size, script arguments); world None: rank 1 of LAUNCH's job
    "z0-w4": (4, ("--stage", "0")),
    "z1-w1": (1, ("--stage", "1")), "z1-w4": (4, ("--stage", "1")),
    "z2-w1": (1, ("--stage", "2")), "z2-w4": (4, ("--stage", "2")),
    "z3-w1": (1, ("--stage", "3")), "z3-w4": (4, ("--stage", "3")),
    "z2-w4-fp16": (4, ("--stage", "2", "--fp16")),
    "z0-w4-lamb": (4, ("--stage", "0", "--optimizer", "Lamb")),
    "z2-w4-lion": (4, ("--stage", "2", "--optimizer", "Lion")),
    "z2-w4-offload": (4, ("--stage", "2", "--offload-optimizer")),
    "z3-w4-offload": (4, ("--stage", "3", "--offload-optimizer")),
    "z3-w4-offload-all": (4, ("--stage", "3", "--offload-optimizer", "--offload-param")),
    "launch-r1": (None, ()),
    "trainer-z3-w4": (4, ("out", "--stage", "3")),  # TRAINER, not SCRIPT
    # from_pretrained of a local checkpoint (CKPT, written by the fixture), the Trainer's own
    # AdamW (no "optimizer" in the DeepSpeed config), as run_clm.py runs with --deepspeed
    "trainer-z2-w4-pretrained": (4, ("out", "--stage", "2", "--pretrained", "{ckpt}",
                                     "--trainer-optimizer")),
    "trainer-z3-w4-pretrained": (4, ("out", "--stage", "3", "--pretrained", "{ckpt}",
                                     "--trainer-optimizer")),
}
TRAINER = TESTS / "scripts" / "deepspeed" / "trainer_llama_zero.py"


def _trace(tmp, name: str) -> dict:
    world, args = RUNS[name]
    snap = tmp / f"{name}-{uuid.uuid4().hex[:8]}.json"
    args = tuple(a.format(ckpt=tmp / "llama-ckpt") for a in args)
    job = ("--rank", "1", "--from-script", str(LAUNCH)) if world is None else \
        ("--world-size", str(world), "--rank", "0", "--",
         str(TRAINER if name.startswith("trainer") else SCRIPT), *args)
    out = run_memlens("run", "--device", DEVICE, "--json", "--progress", "none", "--snapshot",
                      str(snap), *job, cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


def _write_checkpoint(path) -> None:
    """trainer_llama_zero.py's Llama (LLAMA_PSI parameters) saved as a real fp32 safetensors
    checkpoint, for `from_pretrained(path)`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deepspeed")
    _write_checkpoint(tmp / "llama-ckpt")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(lambda name: _trace(tmp, name), RUNS)))


def _states(snap: dict, device: str | None = None) -> dict[str, int]:
    live = live_requested(snap, phase_start(snap, STEP), device)
    return {k: live[k] for k in ("parameter", "gradient", "optimizer_state")}


def stage12_partition(world: int) -> int:
    """Elements of a rank's partition: the flat buffer padded to a multiple of 2N."""
    return -(-PSI // (2 * world)) * 2 * world // world


def stage3_partition(world: int) -> int:
    return sum(math.ceil(n / world) for n in SHAPES)


def test_the_model_and_its_partitions():
    assert PSI == 4 * 262_656 + 5_130 == 1_055_754
    # Ψ is 2 mod 8: at N = 4 the flat buffer is padded by 6 elements to 1,055,760.
    assert stage12_partition(1) == PSI and stage12_partition(4) == 263_940
    # Stage 3: 4 x 65,536 + 4 x 128 + 1,280 + ceil(10 / 4) = 3.
    assert stage3_partition(1) == PSI and stage3_partition(4) == 263_939


@pytest.mark.parametrize("stage,world", [(1, 1), (1, 4), (2, 1), (2, 4)])
def test_zero_1_and_2_hold_the_full_16_bit_model_and_a_partition_of_the_rest(runs, stage,
                                                                            world):
    part = stage12_partition(world)
    got = _states(runs[f"z{stage}-w{world}"])
    # ZeRO's 2Ψ (plus the padding) and 12Ψ/N; the fp32 gradient of the master partition.
    assert got == {"parameter": 2 * part * world, "optimizer_state": 12 * part,
                   "gradient": 4 * part}


@pytest.mark.parametrize("world", [1, 4])
def test_zero_3_holds_a_partition_of_everything(runs, world):
    part = stage3_partition(world)
    got = _states(runs[f"z3-w{world}"])
    # ZeRO's 2Ψ/N and 12Ψ/N; gradients: the 16-bit partitions, their fp32 copy and the
    # 16-bit reduce bucket.
    assert got == {"parameter": 2 * part, "optimizer_state": 12 * part,
                   "gradient": 2 * part + 4 * part + 2 * BUCKET}


def test_model_states_shrink_with_the_world_as_zeros_formulas_say(runs):
    """Per-rank model states at N = 4 against N = 1: stage 1 keeps 2Ψ of parameters and
    divides the 12Ψ of optimizer state; stage 3 divides everything."""
    one, four = (sum(_states(runs[f"z1-w{n}"]).values()) for n in (1, 4))
    assert one == 2 * PSI + 12 * PSI + 4 * PSI
    assert four == 2 * (PSI + 6) + 16 * (PSI + 6) // 4  # (the padding: see above)
    z3 = sum(_states(runs["z3-w4"]).values()) - 2 * BUCKET
    assert z3 == 20 * stage3_partition(4)  # 2 + 12 + (2 + 4) bytes per partitioned parameter
    assert abs(z3 / (20 * PSI / 4) - 1) < 1e-4


def test_without_zero_every_rank_holds_everything(runs):
    """Stage 0 (bf16, the engine's FP16_Optimizer wrapper): the whole flat 16-bit model, the
    whole fp32 master copy with Adam's moments, and its fp32 gradient, on every rank. Ψ is
    even: no padding."""
    assert _states(runs["z0-w4"]) == {"parameter": 2 * PSI, "optimizer_state": 12 * PSI,
                                      "gradient": 4 * PSI}


def test_fp16_keeps_the_same_states_as_bf16(runs):
    """fp16 with dynamic loss scaling: 16-bit parameters as with bf16, same partitions."""
    part = stage12_partition(4)
    assert _states(runs["z2-w4-fp16"]) == {"parameter": 2 * part * 4,
                                           "optimizer_state": 12 * part, "gradient": 4 * part}


def test_lion_keeps_one_moment(runs):
    """DeepSpeed's FusedLion (stand-in: in place, like its multi-tensor kernel): the fp32
    master partition and exp_avg, 8 bytes per partitioned parameter instead of Adam's 12."""
    part = stage12_partition(4)
    assert _states(runs["z2-w4-lion"]) == {"parameter": 2 * part * 4,
                                           "optimizer_state": 8 * part, "gradient": 4 * part}


def test_lamb_allocates_what_its_kernel_allocates(runs):
    """FusedLamb without ZeRO (FP16_UnfusedOptimizer: an fp32 copy of each parameter, bf16
    gradients until the step): 12Ψ of state, 2Ψ of parameters and of gradients. Its kernel
    (csrc/lamb/fused_lamb_cuda.cpp) allocates per parameter two 512-element fp32 reduction
    buffers and the 1-element coefficient it returns: 10 parameters, 20 + 10 allocations."""
    snap = runs["z0-w4-lamb"]
    assert _states(snap) == {"parameter": 2 * PSI, "optimizer_state": 12 * PSI,
                             "gradient": 2 * PSI}
    step = next(p for p in snap["phases"] if p["name"] == STEP)
    empty = snap["ops"].index("empty")
    made = [r["requested_bytes"] for r in _rows(snap)
            if r["op"] == empty and step["start_seq"] <= r["alloc_seq"] < step["end_seq"]]
    assert sorted(made) == [4] * 10 + [512 * 4] * 20


def test_offload_optimizer_moves_the_optimizer_states_to_the_host(runs):
    part = stage12_partition(4)
    snap = runs["z2-w4-offload"]
    # The GPU keeps the 16-bit model and the staging buffer of the largest parameter's
    # gradient (stage_1_and_2.py temp_grad_buffer_for_gpu_offload, 16-bit).
    assert _states(snap) == {"parameter": 2 * part * 4, "optimizer_state": 0,
                             "gradient": 2 * LARGEST}
    # The host: the fp32 master partition and Adam's moments (DeepSpeedCPUAdam), the fp32
    # gradient partition and the 16-bit host staging buffer of the largest parameter's
    # gradient, and the 16-bit copy of the partition sent back to the GPU after a step.
    assert _states(snap, "cpu") == {"parameter": 2 * part, "optimizer_state": 12 * part,
                                    "gradient": 4 * part + 2 * LARGEST}
    assert any("cpu_adam" in n for n in snap["meta"]["notes"])


def test_zero_3_offload_keeps_only_parameters_and_the_bucket_on_the_gpu(runs):
    part = stage3_partition(4)
    snap = runs["z3-w4-offload"]
    assert _states(snap) == {"parameter": 2 * part, "optimizer_state": 0,
                             "gradient": 2 * BUCKET}
    # stage3.py: with the optimizer offloaded the 16-bit gradient partitions are on the host
    # (pinned), next to the fp32 master partition, its gradient and Adam's moments.
    assert _states(snap, "cpu") == {"parameter": 0, "optimizer_state": 12 * part,
                                    "gradient": 2 * part + 4 * part}


def test_zero_3_offload_param_leaves_only_the_bucket_on_the_gpu(runs):
    """With `offload_param` too the 16-bit partitions live on the host (gathered onto the GPU
    layer by layer while they are used)."""
    part = stage3_partition(4)
    snap = runs["z3-w4-offload-all"]
    assert _states(snap) == {"parameter": 0, "optimizer_state": 0, "gradient": 2 * BUCKET}
    assert _states(snap, "cpu") == {"parameter": 2 * part, "optimizer_state": 12 * part,
                                    "gradient": 2 * part + 4 * part}


def test_fused_adam_is_a_stand_in_and_nothing_was_compiled(runs):
    for name in ("z1-w4", "z3-w4"):
        notes = runs[name]["meta"]["notes"]
        assert any("fused_adam" in n and "stand-in" in n for n in notes), notes


def test_the_deepspeed_launch_line_gives_the_job_and_the_rank_its_gpu(runs):
    """`deepspeed --num_gpus 4 zero_mlp.py --stage 3`, rank 1: 4 ranks, the rank's own GPU
    (DeepSpeed selects cuda:LOCAL_RANK), and rank 1's partitions, which are as large as rank
    0's (ceil(numel / N) each; the padding sits at the end of the last rank's)."""
    snap = runs["launch-r1"]
    assert (snap["meta"]["world_size"], snap["meta"]["rank"]) == (4, 1)
    assert snap["meta"]["device_key"] == "cuda:1"
    part = stage3_partition(4)
    assert _states(snap) == {"parameter": 2 * part, "optimizer_state": 12 * part,
                             "gradient": 2 * part + 4 * part + 2 * BUCKET}


# trainer_llama_zero.py's Llama: width 128, 2 layers, 4 heads of 32 and 2 key/value heads,
# MLP 256, vocabulary 1,000, untied: embeddings 1000 x 128, per layer q and o 128 x 128, k and v
# 128 x 64, gate, up and down 128 x 256 each, two norms of 128; the final norm; the head
# 128 x 1000.
LLAMA_LAYER = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 256 + 2 * 128
LLAMA_PSI = 1000 * 128 + 2 * LLAMA_LAYER + 128 + 128 * 1000


# The Trainer's own AdamW (--trainer-optimizer) has two parameter groups, with and without
# weight decay (the 5 norms of 128 have none); torch's AdamW keeps a 4-byte `step` tensor per
# flat fp32 partition, one per group.
NORM_PSI = 5 * 128


def test_the_hf_trainer_with_a_deepspeed_config_runs_zero_3(runs):
    """`TrainingArguments(deepspeed=ds_config)` (trainer_llama_zero.py). Every size divides by
    4, so a rank's stage-3 partition is Ψ/4; the reduce bucket is 65,536 bf16 elements."""
    assert LLAMA_PSI == 551_552
    part = LLAMA_PSI // 4
    assert _states(runs["trainer-z3-w4"]) == {"parameter": 2 * part,
                                              "optimizer_state": 12 * part,
                                              "gradient": 2 * part + 4 * part + 2 * 65_536}


def test_a_checkpoint_loaded_by_path_is_partitioned_by_zero_3(runs):
    """from_pretrained(DIR) after TrainingArguments (under zero.Init), the Trainer's AdamW:
    the same partitions. ZeRO-3 steps its sub-groups one after the other, making each one's
    fp32 gradient just before: when the inner optimizer's first step begins, the no-decay
    group's (the norms', 160 fp32 elements a rank) is not made yet."""
    part = LLAMA_PSI // 4
    assert _states(runs["trainer-z3-w4-pretrained"]) == {
        "parameter": 2 * part, "optimizer_state": 12 * part + 2 * 4,
        "gradient": 2 * part + 4 * (part - NORM_PSI // 4) + 2 * 65_536}


def test_a_checkpoint_loaded_by_path_keeps_its_parameters_through_zero_2(runs):
    """from_pretrained(DIR) and the Trainer's own AdamW (built before deepspeed.initialize,
    holding the loaded parameters), ZeRO-2 on 4 ranks: the parameters DeepSpeed moves to the
    GPU are the optimizer's (a checkpoint read as real host tensors made new ones on `.to()`,
    and ZeRO-2's name lookup failed). Each group's flat buffer (550,912 and 640 elements) is a
    multiple of 2N = 8: no padding. The full bf16 model; 12 bytes of the fp32 master partition
    and Adam's moments per partitioned parameter, and the two groups' steps. Gradients: stage 2
    also steps group by group (`_optimizer_step(i)`), so group 0's fp32 gradient partition
    alone; and `grads_in_partition`, the bf16 buffer contiguous_gradients copies the rank's
    reduced gradients into, sized by the whole parameters its partition touches
    (stage_1_and_2.py: `total_size += param_in_partition.numel()`): rank 0's 137,728 decay
    elements are the embedding (128,000) and part of layer 0's q_proj (16,384), its 160 norm
    elements the first norm (128) and part of the second (128)."""
    assert (LLAMA_PSI - NORM_PSI) % 8 == 0 and NORM_PSI % 8 == 0
    part, part_decay = LLAMA_PSI // 4, (LLAMA_PSI - NORM_PSI) // 4
    assert part_decay == 137_728 and 128_000 < part_decay < 128_000 + 16_384
    touched = (128_000 + 16_384) + (128 + 128)
    assert _states(runs["trainer-z2-w4-pretrained"]) == {
        "parameter": 2 * LLAMA_PSI, "optimizer_state": 12 * part + 2 * 4,
        "gradient": 2 * touched + 4 * part_decay}
