"""Megatron-LM's `--tp-comm-overlap` where Transformer Engine is absent: TE 2.10's Userbuffers
stood in for (plugins/megatron/userbuffers.py), through the stand-in of megatron.training that
asks for them as Megatron-LM does (tests/scripts/megatron_lm_stub).

The numbers below are TE 2.10's, read from its sources (module/base.py initialize_ub,
comm_gemm_overlap.cpp, userbuffers-host.cpp, cpp_extensions/gemm.py), not memlens' formulas."""

from __future__ import annotations

import json

import pytest

from memlens.plugins.megatron import userbuffers
from support import megatron as M
from support.paths import TESTS

STUB = TESTS / "scripts" / "megatron_lm_stub" / "pretrain_stub.py"
MiB = 1 << 20
TE_WORKSPACE = 32 * MiB + 1024  # one cuBLAS workspace of TE's on compute capability 9.0
ROWS, HIDDEN = 1024 * 2, 1024  # --seq-length 1024 x --micro-batch-size 2, --hidden-size


def _trace(memlens, tmp_path, *extra: str) -> dict:
    snapshot = tmp_path / "s.json"
    out = memlens("run", "--world-size", "2", "--rank", "0", "--device", "h100-80gb",
                  "--progress", "none", "--snapshot", str(snapshot), "--", str(STUB),
                  "--tensor-model-parallel-size", "2", "--sequence-parallel",
                  "--seq-length", "1024", "--micro-batch-size", "2", "--hidden-size", "1024",
                  "--global-batch-size", "2", "--vocab-size", "1000", "--bf16",
                  "--train-iters", "100", *extra,
                  cwd=tmp_path, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(snapshot.read_text())


def _after_step(snap: dict) -> int:
    """Bytes alive when the trace ended (after its last optimizer step)."""
    return sum(r["requested_bytes"] for r in M._rows(snap) if r["free_seq"] < 0)


@M.NEEDS
@pytest.mark.slow  # traces in fresh processes
def test_userbuffers_are_outside_the_allocator_and_their_gemms_keep_three_workspaces(
        memlens, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "overlap").mkdir()
    cfg = tmp_path / "overlap" / "ub.yaml"
    cfg.write_text("fc2_fprop:\n  method: ring_exchange\n  aggregate: 0\n"
                   "qkv_dgrad:\n  method: bulk\n  num_sm: 2\n")
    plain = _trace(memlens, tmp_path / "plain")
    overlap = _trace(memlens, tmp_path / "overlap", "--tp-comm-overlap",
                     "--tp-comm-overlap-cfg", str(cfg))

    # Twelve BF16 buffers of [2048, 1024] (4 MiB), fc2_fprop's a ring-exchange reduce-scatter
    # one of (2 tp - 1) / tp of that; the communicator's region of 3,223,808 B rounded up to
    # 2 MiB; 128 KiB of flags. None of it in PyTorch's allocator.
    [line] = [i for i in overlap["summary"]["outside_allocator"] if "Userbuffers" in i["label"]]
    assert line["bytes"] == 11 * 4 * MiB + 6 * MiB + 4 * MiB + 128 * 1024
    assert not line["counted_by_allocator"]
    assert not any("Userbuffers" in i["label"] for i in plain["summary"]["outside_allocator"])

    # The overlapped GEMMs' workspace: three of TE's in one tensor, kept from the first
    # (qkv's forward), beside TE's usual one, which the row-parallel weight gradients take.
    kept = {}
    for r in M._rows(overlap):
        name = overlap["ops"][r["op"]]
        if name in ("te_ub_cublas_workspace", "te_cublas_workspace"):
            assert r["free_seq"] < 0
            kept.setdefault(name, []).append(r["requested_bytes"])
    assert kept == {"te_ub_cublas_workspace": [3 * TE_WORKSPACE],
                    "te_cublas_workspace": [TE_WORKSPACE]}
    assert _after_step(overlap) - _after_step(plain) == 3 * TE_WORKSPACE
    assert "Userbuffers" in " ".join(overlap["meta"]["notes"])


def test_the_buffers_te_makes_for_a_configuration():
    """initialize_ub's buffers: uint8 where the mode is FP8 and the GEMM all-gathers, BF16
    otherwise (proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad); a data gradient configured to
    reduce-scatter instead of a bulk all-gather loses its FP8 buffer, and a pipelined GEMM
    may ask for one."""
    shape, n = (4096, 8192), 4096 * 8192
    sizes = {name: b for name, _, b in userbuffers.buffers(shape, 8, [True], None)}
    assert len(sizes) == 12
    assert {name for name, b in sizes.items() if b == 2 * n} == {
        "proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad"}
    assert sum(sizes.values()) == 16 * n  # 8 x 1 B + 4 x 2 B per element
    assert sum(b for _, _, b in userbuffers.buffers(shape, 8, [False], None)) == 24 * n
    both = userbuffers.buffers(shape, 8, [True, False], None)
    assert len(both) == 24 and sum(b for _, _, b in both) == 40 * n

    cfg = {"fc1_dgrad": {"method": "ring_exchange"}, "proj_fprop": {"fp8_buf": True}}
    sizes = {name: b for name, _, b in userbuffers.buffers(shape, 8, [True], cfg)}
    assert sizes["fc1_dgrad"] == 2 * n * 15 // 8  # BF16, ring-exchange reduce-scatter
    assert sizes["proj_fprop"] == n  # a pipelined GEMM's FP8 buffer
    assert sizes["fc1_wgrad"] == 2 * n  # still made, no longer reduce-scattered
