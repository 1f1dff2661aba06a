"""GPU training scripts run unmodified on a machine without a GPU, and see the target GPU."""

import json
import re

import pytest

from support.paths import TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

GPU_STYLE = str(TESTS / "scripts" / "gpu_style.py")


def run(memlens, device):
    out = memlens("run", "--device", device, "--json", "--no-snapshot", "--", GPU_STYLE)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), out.stderr


def test_the_script_prints_our_peak_as_max_memory_allocated(memlens):
    data, stderr = run(memlens, "h100-80gb")
    assert "training on NVIDIA H100 80GB HBM3 with 79.6 GiB, sm_90" in stderr
    printed = [int(v) for v in re.findall(r"max_memory_allocated=(\d+)", stderr)]
    assert len(printed) == 2  # two iterations traced, then the script was stopped
    assert printed[-1] == data["peak_bytes"]
    assert printed[0] < printed[1]  # optimizer state exists in the second iteration


@pytest.mark.parametrize("device,backend", [("h100-80gb", "flash"), ("a100-80gb", "flash")])
def test_attention_takes_the_kernel_the_gpu_would(memlens, device, backend, tmp_path):
    """PyTorch prefers cuDNN attention on Hopper (CUDA 13 builds) and flash on Ampere, but
    cuDNN's dropout comes in steps of 1/16 (sdp_utils.cpp check_cudnn_dropout): this script's
    dropout_p=0.1 sends Hopper to flash too (tests/cuda/test_sdpa_backends.py has the cuDNN cases)."""
    snap = tmp_path / "s.json"
    out = memlens("run", "--device", device, "--snapshot", str(snap), "--", GPU_STYLE)
    assert out.returncode == 0, out.stderr[-3000:]
    kernels = json.loads(snap.read_text())["meta"]["kernels"]["scaled_dot_product_attention"]
    assert kernels == {backend: 2 * 2}  # two layers, two iterations
