"""The FP8 GEMM a compiled graph calls, `aten::_scaled_mm.out` (patches/scaled_mm_out.py):
torch 2.13 has no Meta kernel for it, and FakeTensorMode asked the simulated GPU for a real
tensor. scripts/fp8/compiled_scaled_mm.py: (256 x 512) @ (512 x 128) to bf16 in a compiled
function, called twice; its output is a buffer of Inductor's."""

import pytest

from support.paths import TESTS
from support.ranks import _rows, allocations_of
from support.runs import run_memlens, run_script_on_h100

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "fp8" / "compiled_scaled_mm.py"


def test_a_compiled_fp8_gemm_writes_into_inductors_buffer(tmp_path):
    _, snap = run_script_on_h100(tmp_path, SCRIPT, "fp8")
    [region] = snap["meta"]["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 1, 0)
    # Per call, in Inductor's buffers: a and b cast to e4m3 (1 B each: 256 x 512 and 128 x 512)
    # and the bf16 output (256 x 128 x 2 B, as large as b's copy); the GEMM's cuBLAS workspace
    # (32 MiB on Hopper) once.
    # (Inductor's small reduction buffers for the absolute maxima are left out.)
    buffers = snap["ops"].index("empty_strided")
    assert [r["requested_bytes"] for r in _rows(snap) if r["op"] == buffers
            and r["requested_bytes"] >= 1024] == [256 * 512, 128 * 512, 256 * 128 * 2] * 2
    assert allocations_of(snap, 32 * 2**20) == 1


def test_a_compiled_fp8_gemm_on_an_a100_is_refused_as_cuda_refuses_it(tmp_path):
    out = run_memlens("run", "--device", "a100-80gb", "--no-snapshot", "--", str(SCRIPT),
                      cwd=tmp_path)
    assert out.returncode == 1
    assert "torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0" \
        in out.stderr
