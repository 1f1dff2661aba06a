"""Distributed training code as public scripts write it, run unmodified as one simulated rank:
FSDP2 on a model built on the meta device and initialised after sharding (torchtitan's way),
`init_device_mesh` without `init_process_group`, ZeroRedundancyOptimizer, and every way of
starting a process group, none of which may open a socket.

Scripts: scripts/distributed/{fsdp2_meta_init,device_mesh_tp_bringup,zero1_train,
nccl_bringup}.py. They are GPU scripts (they call `to_empty(device="cuda")`,
`torch.cuda.set_device`): traced for a simulated H100 whatever MEMLENS_TEST_DEVICE says."""

import json
import re
import socket

import pytest

from support.runs import run_memlens
from support.ranks import SCRIPTS, local_shard, model_state_bytes, numel, padded_shard, trace_all

pytestmark = pytest.mark.slow  # traces in fresh processes

GPU = "h100-80gb"
F32 = 4
WORLD = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bringup")
    plan = {"meta-r0": ("fsdp2_meta_init.py", WORLD, 0), "meta-r3": ("fsdp2_meta_init.py", WORLD, 3),
            "mesh-r3": ("device_mesh_tp_bringup.py", WORLD, 3, "--tp", "2"),
            "zero-r0": ("zero1_train.py", WORLD, 0), "zero-r3": ("zero1_train.py", WORLD, 3),
            "adamw-r3": ("zero1_train.py", WORLD, 3, "--plain-adamw")}
    return dict(zip(plan, trace_all(tmp, list(plan.values()), device=GPU)))


# -- FSDP2 on the meta device (fsdp2_meta_init.py) -------------------------------------------
VOCAB, DIM, KV, FFN, LAYERS = 1003, 64, 32, 176, 2


def llama_shapes() -> list[tuple[int, ...]]:
    """The small Llama's parameters in order: embedding, per block (attention norm, wq, wk,
    wv, wo, ffn norm, w1, w2, w3), final norm, output."""
    block = [(DIM,), (DIM, DIM), (KV, DIM), (KV, DIM), (DIM, DIM), (DIM,), (FFN, DIM),
             (DIM, FFN), (FFN, DIM)]
    return [(VOCAB, DIM), *block * LAYERS, (DIM,), (VOCAB, DIM)]


def test_meta_device_model_is_sharded_materialised_and_initialised_per_rank(runs):
    shapes = llama_shapes()
    assert sum(numel(s) for s in shapes) == 220_864
    padded = sum(padded_shard(s, WORLD) for s in shapes)
    # 1,003 rows -> 251 per rank (1,004 allocated); every other dim 0 splits evenly.
    assert padded == 55_248 == 220_864 // WORLD + 2 * DIM // WORLD
    for rank in (0, 3):
        snap = runs[f"meta-r{rank}"]
        local = sum(local_shard(s, WORLD, rank) for s in shapes)
        assert model_state_bytes(snap) == {"parameter": F32 * padded, "gradient": F32 * padded,
                                           "optimizer_state": 2 * F32 * local}, rank
        # After to_empty and init_weights, before the first forward: only the rank's shards
        # exist (nothing of the full model was ever allocated on the rank's GPU).
        assert model_state_bytes(snap, "forward_backward_iter_0")["parameter"] == F32 * padded
        assert snap["meta"]["device_key"] == f"cuda:{rank}"
        assert list(snap["summary"]["devices"]) == [f"cuda:{rank}", "cpu"]  # no "meta" device
    # Rank 3 holds 250 of the 1,003 rows of the embedding and the output.
    assert sum(local_shard(s, WORLD, 3) for s in shapes) == padded - 2 * DIM


def test_meta_device_model_without_fsdp(tmp_path):
    """One process (no --world-size): built on meta, to_empty(device="cuda"), init_weights;
    the whole model is the GPU's: 4 + 4 + 8 bytes per parameter."""
    snap_path = tmp_path / "plain.json"
    out = run_memlens("run", "--device", GPU, "--json", "--progress", "none", "--snapshot",
                      str(snap_path), "--", str(SCRIPTS / "fsdp2_meta_init.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    snap = json.loads(snap_path.read_text())
    psi = 220_864
    assert model_state_bytes(snap) == {"parameter": F32 * psi, "gradient": F32 * psi,
                                       "optimizer_state": 2 * F32 * psi}
    assert re.search(r"step 1 loss \S+ grad norm \S+", out.stderr)  # the script printed it
    assert "meta:0" not in snap["summary"]["devices"]


# -- init_device_mesh without init_process_group (device_mesh_tp_bringup.py) ---------------
def test_device_mesh_starts_the_process_group_itself(runs):
    """Mesh dp x tp = 2 x 2, rank 3 = (dp 1, tp 1). Per block: LayerNorm (2 x 256) and w2's
    bias (256) replicated over tp, w1 (1,024 x 256 + 1,024) and w2's weight (256 x 1,024)
    split over tp; embedding, final LayerNorm and head replicated over tp; everything then
    split over 2 dp ranks."""
    snap = runs["mesh-r3"]
    block_per_tp_rank = 2 * 256 + (1024 * 256 + 1024) // 2 + 256 * 1024 // 2 + 256
    per_tp_rank = 1024 * 256 + 2 * block_per_tp_rank + 2 * 256 + 256 * 1024
    per_rank = per_tp_rank // 2
    assert per_rank == 525_824
    assert model_state_bytes(snap) == {"parameter": F32 * per_rank, "gradient": F32 * per_rank,
                                       "optimizer_state": 2 * F32 * per_rank}
    assert snap["meta"]["parallel"]["role"] == "dp 1/2 · tp 1/2"
    assert snap["meta"]["device_key"] == "cuda:3"


# -- ZeRO-1 (zero1_train.py) -------------------------------------------------------------------
ZERO_SIZES = [65_536, 256] * 8 + [2_560, 10]  # 8 x Linear(256, 256), Linear(256, 10)


def zero_partition(sizes: list[int], world: int) -> list[int]:
    """ZeroRedundancyOptimizer._partition_parameters: parameters sorted by size (largest first,
    a stable sort), each given to the rank with the fewest elements so far (the lowest such
    rank). Returns each rank's number of elements."""
    totals = [0] * world
    for n in sorted(sizes, reverse=True):
        totals[totals.index(min(totals))] += n
    return totals


def test_zero1_keeps_the_optimizer_state_of_the_ranks_partition(runs):
    psi = sum(ZERO_SIZES)
    assert psi == 528_906
    shares = zero_partition(ZERO_SIZES, WORLD)
    # Rank 0: two weights and the head's weight; ranks 1 and 2: two weights and three biases;
    # rank 3: two weights, two biases and the head's bias.
    assert shares == [133_632, 131_840, 131_840, 131_594] and sum(shares) == psi
    adamw = model_state_bytes(runs["adamw-r3"])
    assert adamw["optimizer_state"] == 2 * F32 * psi
    for rank in (0, 3):
        states = model_state_bytes(runs[f"zero-r{rank}"])
        # DDP with gradient_as_bucket_view: full parameters and one copy of the gradients.
        assert states["parameter"] == states["gradient"] == F32 * psi
        # AdamW's exp_avg and exp_avg_sq: 8 bytes per parameter of the rank's partition,
        # about 1/4 of plain AdamW's.
        assert states["optimizer_state"] == 2 * F32 * shares[rank]
        assert abs(states["optimizer_state"] * WORLD / adamw["optimizer_state"] - 1) < 0.011


# -- process group bring-up without a socket (nccl_bringup.py) --------------------------------
@pytest.mark.parametrize("init,rank", [("env", 1), ("tcp", 0), ("file", 1), ("store", 1)])
def test_process_group_bring_up_opens_no_socket(tmp_path, init, rank):
    """The port the script rendezvous at is held open by the test. A rank that tried to
    connect would be seen in the listener's queue (and then wait for ever for an answer); rank
    0 of a TCPStore or tcp:// would try to bind the port, which is taken. So the run must end
    (each of these waits 30 minutes for the other rank otherwise), with nothing connected."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        snap_path = tmp_path / "rank.json"
        out = run_memlens("run", "--device", GPU, "--world-size", "2", "--rank", str(rank),
                          "--json", "--progress", "none", "--snapshot", str(snap_path), "--",
                          str(SCRIPTS / "nccl_bringup.py"), "--init", init, "--port", str(port),
                          cwd=tmp_path, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    snap = json.loads(snap_path.read_text())
    assert snap["meta"]["parallel"]["backend"] == "nccl"
    psi = 1024 * 1024 + 1024
    # Parameters, gradients plus DDP's bucket, SGD's momentum.
    assert model_state_bytes(snap) == {"parameter": F32 * psi, "gradient": 2 * F32 * psi,
                                       "optimizer_state": F32 * psi}
    assert "UserWarning" not in out.stderr  # _set_pg_timeout on the 'nccl' group is quiet
