"""FSDP2 shards held in host memory, as litgpt's LoRA fine-tuning on 8 GPUs leaves its frozen
base (Fabric's ModelParallelStrategy; litgpt loads the checkpoint with `cpu_offload=True`:
each shard is moved to the CPU and assigned). FSDP2 gathers them on every forward with its
op `fsdp::all_gather_copy_in`, whose CUDA kernel copies host shards into the GPU's all-gather
buffer; the fake op refused inputs on two devices ("found at least two devices, cpu and
cuda:0") before.

Script: scripts/platform/fabric_fsdp2_host_base.py, traced as rank 0 of 8."""

import json

import pytest

from support.paths import TESTS
from support.ranks import model_state_bytes
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # a trace in a fresh process

SCRIPT = TESTS / "scripts" / "platform" / "fabric_fsdp2_host_base.py"
F32, WORLD = 4, 8
BASE = 2 * 1024 * 1024  # two bias-free 1024 x 1024 linears, frozen
ADAPTER = 1024 * 16 + 16 * 1024  # down 1024 -> 16, up 16 -> 1024, trained


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host_shards")
    out = run_memlens("run", "--device", "h100-80gb", "--world-size", str(WORLD), "--rank", "0",
                      "--json", "--progress", "none", "--snapshot", str(tmp / "s.json"), "--",
                      str(SCRIPT), cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads((tmp / "s.json").read_text())


def test_the_frozen_base_shards_stay_on_the_host(snap):
    assert BASE == 2_097_152
    # Each rank keeps 1/8 of each weight (1024 rows split 8 ways), in host memory; no
    # gradient; AdamW's only host state is its step counter, a 4-byte fp32 scalar per
    # trained parameter (down and up).
    assert model_state_bytes(snap, device="cpu") == {
        "parameter": F32 * BASE // WORLD, "gradient": 0, "optimizer_state": 2 * 4}


def test_the_gpu_holds_the_adapter_shard_its_gradient_and_moments(snap):
    assert ADAPTER == 32_768
    shard = ADAPTER // WORLD  # 16 rows of `up`'s 1024 split 8 ways; `down`'s 16 split 8 ways
    assert model_state_bytes(snap) == {"parameter": F32 * shard, "gradient": F32 * shard,
                                       "optimizer_state": 2 * F32 * shard}
