"""PyTorch Lightning traced unmodified: a LightningModule fit by `Trainer(accelerator="gpu")` on
one GPU, with DDP as rank 1 of 4 and with FSDP as rank 0 of 4 (`memlens run --world-size 4
--rank R -- script --devices 4`: Lightning finds the torchrun environment memlens gives the
rank), with DeepSpeed ZeRO stages 2 and 3 as rank 0 of 4 (Lightning's `deepspeed_stage_2/3`
strategies, DeepSpeed's own code), tensor parallelism with ModelParallelStrategy (its DeviceMesh is split from the
device-bound default group: "No backend for the parent process group or its backend does not
support splitting" before), and a Fabric loop (`Fabric(accelerator="cuda", devices=1)`, `fabric.backward`).

The LightningModule overrides `prepare_data`: on a distributed job Lightning runs it inside its
infinite barrier (a Gloo group's `monitored_barrier`; "Backend fake does not support
monitoredBarrier" before).

Lightning runs the forward and backward inside the closure it hands `optimizer.step`: the
phases still follow the steps (forward/backward, then the optimizer step), and the gradients
made inside the closure are gradients. Model states are checked when the second optimizer
step begins.

Scripts: scripts/platform/lightning_trainer.py, lightning_fabric.py,
lightning_tensor_parallel.py."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from support.paths import TESTS
from support.ranks import model_state_bytes
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts" / "platform"
F32, WORLD = 4, 4
PSI = (512 * 1024 + 1024) + (1024 * 512 + 512)  # the MLP: 512 -> 1024 -> 512
PHASES = ["setup_model_and_optimizer", "forward_backward_iter_0", "optimizer_step_iter_0",
          "forward_backward_iter_1", "optimizer_step_iter_1"]
RUNS = {
    "trainer": ((), ("lightning_trainer.py",)),
    "ddp-r1": (("--world-size", "4", "--rank", "1"),
               ("lightning_trainer.py", "--devices", "4", "--strategy", "ddp")),
    "fsdp-r0": (("--world-size", "4", "--rank", "0"),
                ("lightning_trainer.py", "--devices", "4", "--strategy", "fsdp")),
    "fabric": ((), ("lightning_fabric.py",)),
    "tp-r0": (("--world-size", "4", "--rank", "0"), ("lightning_tensor_parallel.py",)),
    "ds2-r0": (("--world-size", "4", "--rank", "0"),
               ("lightning_trainer.py", "--devices", "4", "--strategy", "deepspeed_stage_2")),
    "ds3-r0": (("--world-size", "4", "--rank", "0"),
               ("lightning_trainer.py", "--devices", "4", "--strategy", "deepspeed_stage_3")),
}


@pytest.fixture(scope="module")
def snaps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lightning")

    def trace(name: str) -> dict:
        options, (script, *args) = RUNS[name]
        snap = tmp / f"{name}.json"
        out = run_memlens("run", "--device", "h100-80gb", *options, "--json", "--progress",
                          "none", "--snapshot", str(snap), "--", str(SCRIPTS / script), *args,
                          cwd=tmp)
        assert out.returncode == 0, f"{name}: {out.stderr[-4000:]}"
        return json.loads(snap.read_text())

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(trace, RUNS)))


def phases(snap: dict) -> list[str]:
    return [p["name"] for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]]


@pytest.mark.parametrize("name", list(RUNS))
def test_phases_follow_the_steps(snaps, name):
    assert phases(snaps[name]) == PHASES


@pytest.mark.parametrize("name", ["trainer", "fabric"])
def test_one_gpu_holds_the_whole_model_state(snaps, name):
    assert PSI == 1_050_112
    snap = snaps[name]
    assert snap["meta"]["device_key"] == "cuda:0"
    # fp32 parameters and gradients, AdamW's two moments.
    assert model_state_bytes(snap) == {"parameter": F32 * PSI, "gradient": F32 * PSI,
                                       "optimizer_state": 2 * F32 * PSI}


def test_ddp_rank_adds_its_gradient_bucket(snaps):
    snap = snaps["ddp-r1"]
    assert snap["meta"]["device_key"] == "cuda:1"  # LOCAL_RANK 1's GPU
    assert snap["meta"]["parallel"]["backend"] == "nccl"
    # DDP keeps its bucket (a flat copy of every gradient, 4 MiB < DDP's 25 MiB bucket cap)
    # next to the gradients.
    assert model_state_bytes(snap) == {"parameter": F32 * PSI, "gradient": 2 * F32 * PSI,
                                       "optimizer_state": 2 * F32 * PSI}


def test_fsdp_rank_holds_a_quarter(snaps):
    snap = snaps["fsdp-r0"]
    # Lightning's FSDP wraps the root only: one flat parameter of PSI elements, which 4
    # divides evenly, sharded over the 4 ranks; its gradient and AdamW's moments follow.
    shard = PSI // WORLD
    assert shard * WORLD == PSI
    assert model_state_bytes(snap) == {"parameter": F32 * shard, "gradient": F32 * shard,
                                       "optimizer_state": 2 * F32 * shard}


def test_tensor_parallel_rank_holds_its_column_and_row_shards(snaps):
    snap = snaps["tp-r0"]
    # ColwiseParallel splits w1's 1,024 output rows (weight and bias) 4 ways; RowwiseParallel
    # splits w2's 1,024 input columns and replicates its 512-element bias.
    local = (1024 // WORLD) * 512 + 1024 // WORLD + 512 * (1024 // WORLD) + 512
    assert local == 262_912
    assert model_state_bytes(snap) == {"parameter": F32 * local, "gradient": F32 * local,
                                       "optimizer_state": 2 * F32 * local}


# Lightning's DeepSpeed strategies: precision 32 (no 16-bit copy: DeepSpeed's "16-bit" groups are
# the fp32 parameters), its default reduce_bucket_size of 2e8 elements. Ψ = 1,050,112 is a
# multiple of 2N = 8 and of N, so no padding: a rank's partition is Ψ/4 = 262,528 elements.
PARTITION = PSI // WORLD
BUCKET = 200_000_000


def test_deepspeed_stage_2_rank_holds_the_model_and_a_quarter_of_adams_states(snaps):
    snap = snaps["ds2-r0"]
    assert PARTITION * WORLD == PSI
    # stage_1_and_2.py: every rank keeps the flat fp32 model (4Ψ); its optimizer state is a
    # copy of its partition (single_partition_of_fp32_groups, cloned) and AdamW's two moments
    # of it (12Ψ/N). Its gradients are `grads_in_partition`, sized by the whole parameters that
    # touch the partition (copy_grads_in_partition): rank 0's elements [0, Ψ/4) lie inside the
    # first layer's 1024 x 512 weight, so 524,288 fp32 gradients.
    assert model_state_bytes(snap) == {"parameter": F32 * PSI, "gradient": F32 * 1024 * 512,
                                       "optimizer_state": 3 * F32 * PARTITION}


def test_deepspeed_stage_3_rank_holds_a_quarter_of_everything_and_its_bucket(snaps):
    snap = snaps["ds3-r0"]
    # stage3.py: the parameters' partitions (4Ψ/N), the fp32 master copy and AdamW's moments of
    # them (12Ψ/N); gradients: the flat buffer of gradient partitions
    # (grad_partitions_flat_buffer), the master partition's gradient, and the reduce bucket of
    # reduce_bucket_size elements (fp32 here: 800,000,000 B).
    assert model_state_bytes(snap) == {
        "parameter": F32 * PARTITION, "gradient": 2 * F32 * PARTITION + F32 * BUCKET,
        "optimizer_state": 3 * F32 * PARTITION}
