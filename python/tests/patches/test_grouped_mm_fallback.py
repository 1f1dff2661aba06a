"""Mixture-of-experts experts in float32 through `torch._grouped_mm`
(scripts/moe/grouped_experts_fp32.py), as transformers runs an fp32 model's experts on a GPU:
CUDA's fallback path allocates only each call's output (one mm per group into its slices,
aten/src/ATen/native/GroupedMMUtils.h), which torch's Meta kernel refused for float32
(patches/grouped_mm_fallback.py). Every allocation of the second step's grouped GEMMs, derived:
256 routed rows, 4 experts, hidden 128, width 256, fp32 (4 B); no row stride needs padding to
16 bytes (128 and 256 are multiples of 4 elements)."""

import pytest

from support.paths import TESTS
from support.ranks import op_allocations
from support.runs import run_script_on_h100

pytestmark = pytest.mark.slow  # traces in a fresh process


def test_float32_grouped_gemms_allocate_their_outputs(tmp_path):
    _, snap = run_script_on_h100(tmp_path, TESTS / "scripts" / "moe" / "grouped_experts_fp32.py",
                                 "experts")
    sizes = op_allocations(snap, "_grouped_mm")
    rows, experts, hidden, width, f32 = 256, 4, 128, 256, 4
    assert sizes == [
        rows * width * f32, rows * hidden * f32,  # forward: up's output, down's output
        experts * width * hidden * f32,  # backward: down's weight gradient (2-D x 2-D)
        rows * width * f32,  # the gradient of down's input
        experts * hidden * width * f32,  # up's weight gradient
        rows * hidden * f32,  # the gradient of x
    ]
