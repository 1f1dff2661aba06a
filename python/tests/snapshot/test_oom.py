"""The verdict against the card, through the CLI: OOM at the right op, phase and line, or the
headroom; PYTORCH_CUDA_ALLOC_CONF read from the traced script's environment."""

import json

import pytest

from support.paths import TESTS
from support.trace_cache import grow_trace, traced

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "grow.py"
GiB, MiB = 1 << 30, 1 << 20
H100 = 81559 * MiB  # the card's total memory
CONTEXT = 512 * MiB  # the CUDA context estimate for h100-80gb
WORKSPACE = 32 * MiB  # one cuBLAS workspace on Hopper
W = 64 * MiB  # the 4096 x 4096 fp32 weight


def _line(marker: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


def _run(memlens, batch: int, env=None):
    # the traces test_export_memory_viz.py exports, once per session (support/trace_cache.py)
    out = grow_trace(batch, env).out
    assert out.returncode == 0, out.stderr  # a predicted OOM is a successful trace
    return json.loads(out.stdout), out.stderr


def test_past_80_gib_is_out_of_memory_at_the_op_and_line(memlens):
    data, stderr = _run(memlens, 320)  # 20 GiB per tensor: the second iteration needs 80 GiB
    oom = data["oom"]
    assert data["fits"] is False
    assert (oom["op"], oom["phase"]) == ("relu", "forward_backward_iter_1")
    assert (oom["file"], oom["line"]) == (str(SCRIPT), _line("does not fit"))
    assert oom["requested_bytes"] == 320 * 64 * MiB
    # Kept y0, x1 and h1 (60 GiB) + w + workspace are in use; the allocator may take the card
    # minus the context, so 20 GiB more cannot be had even after freeing its cache.
    assert oom["reserved_bytes"] == 60 * GiB + W + WORKSPACE
    assert oom["free_bytes"] == H100 - CONTEXT - oom["reserved_bytes"]
    assert oom["message"].startswith("CUDA out of memory. Tried to allocate 20.00 GiB.")
    assert oom["reserved_needed_bytes"] == 80 * GiB + W + WORKSPACE
    assert data["headroom_bytes"] == H100 - (oom["reserved_needed_bytes"] + CONTEXT)
    verdict = " ".join(stderr.split())
    assert f"OUT OF MEMORY at op relu in phase forward_backward_iter_1, grow.py:" \
           f"{_line('does not fit')} (tried to allocate 20.0 GiB" in verdict


def test_a_smaller_batch_fits_with_its_headroom(memlens):
    data, stderr = _run(memlens, 160)  # 10 GiB per tensor
    assert data["fits"] is True and data["oom"] is None
    # Second iteration: y0 kept, x1 and h1 reuse the cached segments of x0 and h0, y1 gets a
    # new one: four 10 GiB segments, the weight's and the workspace's.
    assert data["reserved_peak_bytes"] == 40 * GiB + W + WORKSPACE
    assert data["reserved_peak_phase"] == "forward_backward_iter_1"
    assert data["fragmentation_bytes"] == 0 and data["segments_at_reserved_peak"] == 6
    assert data["outside_allocator_bytes"] == CONTEXT
    assert data["headroom_bytes"] == H100 - (data["reserved_peak_bytes"] + CONTEXT)
    labels = {i["label"]: i for i in data["outside_allocator"]}
    assert labels["cuBLAS workspace x1"]["bytes"] == WORKSPACE
    assert labels["cuBLAS workspace x1"]["counted_by_allocator"] is True
    assert labels["CUDA context (h100-80gb)"]["counted_by_allocator"] is False
    reserved = [p["reserved_peak_bytes"] for p in data["phases"] if p["device"] == "cuda:0"]
    assert reserved == [10 * GiB + W, 30 * GiB + W + WORKSPACE, 30 * GiB + W + WORKSPACE,
                        40 * GiB + W + WORKSPACE, 40 * GiB + W + WORKSPACE]
    assert "Fits: peak reserved 40.1 GiB + outside 512.0 MiB = 40.6 GiB of 79.6 GiB " \
           "(39.1 GiB headroom)" in " ".join(stderr.split())


def test_expandable_segments_reserve_whole_pages_of_what_is_allocated(memlens):
    data, _ = _run(memlens, 160, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    # One growing range for the large pool, mapped in 20 MiB pages, no gaps in this step:
    # reserved = the allocated peak rounded up to pages.
    assert data["peak_bytes"] == 40 * GiB + W + WORKSPACE
    assert data["reserved_peak_bytes"] == -(-data["peak_bytes"] // (20 * MiB)) * 20 * MiB
    assert data["segments_at_reserved_peak"] == 1


def test_a_malformed_alloc_conf_names_the_variable(memlens):
    out = memlens("run", "--device", "h100-80gb", "--no-snapshot", "--", str(SCRIPT),
                  env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:maybe"})
    assert out.returncode == 1
    message = " ".join(out.stderr.split())
    assert "error: PYTORCH_CUDA_ALLOC_CONF: Expected 'True' or 'False'" in message
    assert "'maybe'" in message and "Traceback" not in out.stderr


def test_a_cpu_target_compares_the_allocated_peak_with_the_host():
    # the trace test_cli.py's JSON tests read too, once per session (support/trace_cache.py)
    out = traced("run", "--device", "cpu", "--json", "--", str(TESTS / "scripts" / "patterns.py")).out
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["reserved_peak_bytes"] is None and data["outside_allocator"] is None
    assert data["oom"] is None and data["fits"] is True
    assert data["headroom_bytes"] == data["device_total_bytes"] - data["peak_bytes"]
