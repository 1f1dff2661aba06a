"""Mixture-of-experts experts in float32 through `torch._grouped_mm`
(scripts/moe/grouped_experts_fp32.py), as transformers runs an fp32 model's experts on a GPU:
CUDA's fallback path allocates only each call's output (one mm per group into its slices,
aten/src/ATen/native/GroupedMMUtils.h), which torch's Meta kernel refused for float32
(patches/grouped_mm_fallback.py). Every allocation of the second step's grouped GEMMs, derived:
256 routed rows, 4 experts, hidden 128, width 256, fp32 (4 B); no row stride needs padding to
16 bytes (128 and 256 are multiples of 4 elements)."""

import json

import pytest

from support.paths import TESTS
from support.ranks import _rows
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in a fresh process


def test_float32_grouped_gemms_allocate_their_outputs(tmp_path):
    snap_path = tmp_path / "snap.json"
    out = run_memlens("run", "--progress", "none", "--snapshot", str(snap_path), "--",
                      str(TESTS / "scripts" / "moe" / "grouped_experts_fp32.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    snap = json.loads(snap_path.read_text())
    phase = next(p for p in snap["phases"] if p["name"] == "forward_backward_iter_1")
    op = snap["ops"].index("_grouped_mm")
    sizes = [r["requested_bytes"] for r in _rows(snap) if r["op"] == op
             and phase["start_seq"] <= r["alloc_seq"] < phase["end_seq"]]
    rows, experts, hidden, width, f32 = 256, 4, 128, 256, 4
    assert sizes == [
        rows * width * f32, rows * hidden * f32,  # forward: up's output, down's output
        experts * width * hidden * f32,  # backward: down's weight gradient (2-D x 2-D)
        rows * width * f32,  # the gradient of down's input
        experts * hidden * width * f32,  # up's weight gradient
        rows * hidden * f32,  # the gradient of x
    ]
