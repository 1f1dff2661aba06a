"""CPU kernels' own buffers (workspace rules): a tiny training step around one kernel family,
run for real under torch.profiler (support/measure_cpu.py) and under `memlens run --device cpu`,
must peak at the same byte count (0.1 % tolerance, as the exactness cases). The shapes vary so
that no constant could pass: channel counts off the 16-block, strides, padding, dilation,
groups, batch sizes, conv1d, bf16, strided gradients, channels-last."""

import pytest

from support.paths import TESTS
from support.runs import real_and_traced_on_cpu

pytestmark = pytest.mark.slow  # traces in fresh processes

CASE = str(TESTS / "cases" / "kernel_case.py")
TOLERANCE = 0.001

CASES = {
    # oneDNN convolutions: reorders into blocked layouts, scratchpads, to_dense copies
    "conv-first-layer": ["--net", "conv(3, 20, 3, padding=1) relu", "--input", "4,3,17,17"],
    "conv-strided-nobias": ["--net", "conv(17, 40, 3, stride=2, padding=1, bias=False) relu",
                            "--input", "2,17,16,16", "--input-grad"],
    "conv-1x1-stack": ["--net", "conv(24, 48, 1) relu conv(48, 24, 1)", "--input", "8,24,7,7",
                       "--input-grad"],
    "conv-dilated-grouped": ["--net", "conv(32, 64, 3, padding=2, dilation=2, groups=4) relu",
                             "--input", "2,32,14,14", "--input-grad"],
    "conv1d": ["--net", "conv1d(16, 24, 5, stride=2) relu", "--input", "4,16,50"],
    "conv-bf16": ["--net", "conv(16, 48, 3, padding=1) relu", "--input", "2,16,12,12",
                  "--dtype", "bf16", "--input-grad"],
    # im2col convolutions (batch 1, small images)
    "conv-slow2d": ["--net", "conv(8, 12, 5, padding=2) relu conv(12, 4, 3)", "--input",
                    "1,8,11,11", "--input-grad"],
    "conv-slow-dilated": ["--net", "conv(16, 8, 3, padding=2, dilation=2)", "--input",
                          "1,16,9,9", "--input-grad"],
    # normalization
    "bn-conv": ["--net", "conv(3, 24, 3) bn(24) relu conv(24, 16, 3, stride=2) bn(16)",
                "--input", "4,3,15,15"],
    "bn-channels-last": ["--net", "conv(8, 32, 3, padding=1) bn(32) relu", "--input",
                         "2,8,10,10", "--channels-last"],
    "bn1d-first-layer": ["--net", "bn1d(256) linear(256, 2)", "--input", "64,256"],
    "layernorm": ["--net", "linear(96, 160) ln(160) relu linear(160, 8)", "--input", "32,96"],
    # bf16 matmuls through oneDNN (scratchpads), fp32 flash attention
    "linear-bf16": ["--net", "linear(100, 300) relu linear(300, 37)", "--input", "24,100",
                    "--dtype", "bf16", "--input-grad"],
    "linear-bf16-3d": ["--net", "linear(64, 96) relu linear(96, 64, bias=False)", "--input",
                       "3,20,64", "--dtype", "bf16"],
    "bmm-bf16": ["--net", "linear(32, 48) gram", "--input", "4,16,32", "--dtype", "bf16"],
    "sdpa-fp32": ["--net", "linear(64, 64) sdpa(4) linear(64, 16)", "--input", "2,200,64"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_buffers_match_the_allocator(name):
    args = CASES[name]
    real, est = real_and_traced_on_cpu(CASE, args)
    assert est["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=TOLERANCE)
    for e, r in zip(est["phases"], real["phases"]):
        assert e["peak_bytes"] == pytest.approx(r["peak_bytes"], rel=TOLERANCE), e["name"]
