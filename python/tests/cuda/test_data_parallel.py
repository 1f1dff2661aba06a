"""torch.nn.DataParallel over 4 simulated GPUs in one process (`memlens run --gpus 4`;
cuda/multi_gpu_comm.py): the batch scattered, the model replicated on every GPU each forward,
the outputs gathered on cuda:0, the gradients reduced onto cuda:0, as the CUDA build's
torch/csrc/cuda/comm.cpp allocates them.

One trace of scripts/platform/data_parallel.py (a convnet with BatchNorm, batch 64, SGD)."""

import json
import re

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in a fresh process

SCRIPT = TESTS / "scripts" / "platform" / "data_parallel.py"
GPUS, BATCH, F32, I64 = 4, 64, 4, 8
CATEGORIES = ("parameter", "buffer", "gradient", "optimizer_state", "activation", "temporary",
              "input", "other")
# conv 3->16, 3x3 (432 + 16), BatchNorm 16 (weight, bias), Linear 16*32*32 -> 10
PSI = (3 * 16 * 9 + 16) + (16 + 16) + (16 * 32 * 32 * 10 + 10)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dp")
    snap = tmp / "dp.json"
    out = run_memlens("run", "--device", "h100-80gb", "--gpus", str(GPUS), "--json",
                      "--progress", "none", "--snapshot", str(snap), "--", str(SCRIPT), cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stderr, json.loads(snap.read_text())


def rows(snap: dict, device: str) -> list[tuple[str, int, str]]:
    """(op, requested bytes, category) of every allocation on `device`, in order."""
    a = snap["allocations"]
    d = a["devices"].index(device)
    return [(snap["ops"][a["op"][i]], a["requested_bytes"][i], CATEGORIES[a["category"][i]])
            for i in range(len(a["bytes"])) if a["device"][i] == d]


def test_the_script_sees_four_gpus_and_gets_its_output_on_cuda0(traced):
    stderr, snap = traced
    assert re.search(r"^GPUS 4$", stderr, re.M)
    assert re.findall(r"^OUTPUT (.+)$", stderr, re.M) == ["cuda:0 (64, 10)"] * 2
    assert PSI == 164_330
    assert sorted(snap["allocations"]["devices"]) == ["cpu", "cuda:0", "cuda:1", "cuda:2",
                                                      "cuda:3"]


@pytest.mark.parametrize("device", ["cuda:1", "cuda:2", "cuda:3"])
def test_each_other_gpu_holds_a_replica_and_its_quarter_of_the_batch(traced, device):
    _, snap = traced
    on = rows(snap, device)
    # Scatter: 64 / 4 = 16 images of 3 x 32 x 32 fp32, copied in; the first thing there.
    assert on[0] == ("_to_copy", BATCH // GPUS * 3 * 32 * 32 * F32, "activation")
    # Replicate: all fp32 parameters fit one 10 MiB bucket, so one flat copy per forward.
    assert [n for _, n, c in on if c == "parameter"] == [PSI * F32] * 2
    # Buffers: the fp32 running mean and variance (2 x 16) in one bucket, the int64 step
    # count in another, per forward.
    assert [n for _, n, c in on if c == "buffer"] == [I64, 2 * 16 * F32] * 2


def test_cuda0_keeps_the_originals_and_gathers(traced):
    _, snap = traced
    on = rows(snap, "cuda:0")
    # Its quarter of the batch is a view of the input: no copy of 16 images on cuda:0.
    assert ("_to_copy", BATCH // GPUS * 3 * 32 * 32 * F32, "activation") not in on
    # The parameters' bucket is flattened there (a copy) before the broadcast, each forward,
    # and cuda:0's gradients are flattened for the reduce, each backward: 2 per iteration.
    assert [n for op, n, _ in on if op == "cat" and n == PSI * F32] == [PSI * F32] * 4
    # Gather: one 64 x 10 fp32 output on cuda:0 per forward.
    assert [n for op, n, _ in on if op == "empty" and n == BATCH * 10 * F32] == \
        [BATCH * 10 * F32] * 2
    # The gradients are reduced into one flat tensor on cuda:0 (NCCL reduce's output).
    assert [n for _, n, c in on if c == "gradient"] == [PSI * F32] * 2


def test_gpus_is_for_a_single_process(tmp_path):
    """A rank of a distributed job sees its node's GPUs: --gpus with --world-size is refused,
    before anything is traced."""
    out = run_memlens("run", "--gpus", "2", "--world-size", "2", "--no-snapshot", "--",
                      str(SCRIPT), cwd=tmp_path)
    assert out.returncode == 1
    assert "--gpus is for a single process" in out.stderr
    assert "GPUS" not in out.stderr  # the script never ran


def test_buckets_follow_take_tensors():
    """torch::utils::take_tensors, which _broadcast_coalesced buckets by: per type, a bucket
    closes once it holds the limit or more; open ones follow in ScalarType order (int64 before
    float32)."""
    import torch

    from memlens.cuda.multi_gpu_comm import take_tensors

    mib = 1024 * 1024
    tensors = [torch.empty(6 * mib // 4, device="meta"),               # f32, 6 MiB
               torch.empty(4, dtype=torch.int64, device="meta"),       # i64, 32 B
               torch.empty(6 * mib // 4, device="meta"),               # f32: 12 MiB >= 10
               torch.empty(mib // 4, device="meta")]                   # f32, a new bucket
    assert take_tensors(tensors, 10 * mib) == [[0, 2], [1], [3]]
