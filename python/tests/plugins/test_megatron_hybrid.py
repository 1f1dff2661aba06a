"""Megatron's Mamba hybrid models without mamba_ssm (plugins/megatron/mamba.py) and without
Transformer Engine (the hybrid stack's TE spec, stand_ins.py): a small hybrid of Mamba,
attention and MLP layers (scripts/megatron/hybrid_core_train.py), TP 2, traced for rank 1.

What a Mamba layer holds for backward is what mamba_ssm's kernels save, counted from its
sizes: batch b = 2, sequence L = 256, hidden h = 256; d_inner 512 over TP 2 = 16 heads of
P = 32 over 2 = H 8 per rank, 2 groups of state N = 32 over 2 = G 1 per rank.
"""

from __future__ import annotations

import pytest

from support import megatron as M
from support.paths import TESTS
from support.runs import run_memlens

pytestmark = [pytest.mark.slow, M.NEEDS]

SCRIPT = TESTS / "scripts" / "megatron" / "hybrid_core_train.py"
B, L, HIDDEN, H, P, G, N = 2, 256, 256, 8, 32, 1, 32
MIXER = "module.module.decoder.layers.0.mixer"  # pattern M*M-: layer 0 is Mamba


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    return M.trace(tmp_path_factory.mktemp("hybrid"), 2, 1, "--tp", "2", script=SCRIPT)


def test_a_mamba_layer_holds_what_mamba_ssms_kernels_save(snap):
    """Saved for backward in one forward of the first Mamba layer (requested bytes):
    - the norm fused into in_proj (TE's LayerNormLinear): the normalised input, bf16, and
      its mean and rstd, fp32 per token;
    - MambaSplitConv1dScanCombinedFn: its input zxBCdt (z, x, B, C, dt: 2HP + 2GN + H wide)
      and the pre-gate output out_x, bf16; A and dt_bias in fp32 (H each), and exp's output
      for A's gradient;
    - the gated RMSNorm: its input, bf16, and rstd, fp32 per token and group;
    - out_proj: its input (the norm's output), bf16."""
    tokens = B * L
    width = 2 * H * P + 2 * G * N + H
    expected = (tokens * HIDDEN * 2 + 2 * tokens * 4
                + tokens * width * 2 + tokens * H * P * 2 + 3 * H * 4
                + tokens * H * P * 2 + G * tokens * 4
                + tokens * H * P * 2)
    names = {i for i, m in enumerate(snap["modules"]) if m["fqn"].startswith(MIXER)}
    forward = M._phase(snap, "forward_backward_iter_0")
    saved = sum(r["requested_bytes"] for r in M._rows(snap)
                if r["module"] in names and M.CATEGORIES[r["category"]] == "activation"
                and not r["backward"] and forward["start_seq"] <= r["alloc_seq"]
                <= forward["end_seq"])
    assert saved == expected == 1_652_832


def test_the_mamba_stand_ins_are_noted(snap):
    notes = " ".join(snap["meta"]["notes"])
    assert "mamba_ssm is not installed here: Megatron's Mamba layers ran memlens' stand-ins" \
        in notes
    assert "Transformer Engine is not installed here: layers use Megatron's local modules" \
        in notes  # the hybrid stack's spec is TE's


def test_the_unfused_mamba_path_is_refused_by_name(tmp_path):
    out = run_memlens("run", "--world-size", "2", "--rank", "1", "--progress", "none", "--",
                      str(SCRIPT), "--tp", "2", "--no-mem-eff-path", cwd=tmp_path)
    assert out.returncode != 0
    assert "--disable-mamba-mem-eff-path" in out.stderr and "install mamba_ssm" in out.stderr


def test_the_hybrid_stacks_moe_layer_runs_te_grouped_experts(tmp_path):
    """The hybrid stack's MoE spec asks for grouped GEMM with TE's layers; where TE is absent
    its experts are Megatron's TEGroupedMLP on the stand-in for TE's grouped linear layers
    (grouped_linear.py): 4 experts' fc1 (h -> F = 2h, with biases) and fc2 (F -> h), bf16, and
    the four grouped-GEMM workspaces of TE's size (an H100: 32 MiB + 1 KiB)."""
    snap = M.trace(tmp_path, 1, 0, "--pattern", "M*E", "--experts", "4", script=SCRIPT)
    mods = {m["fqn"]: m for m in snap["modules"]}
    experts = "module.module.decoder.layers.2.mlp.experts"
    ffn = 2 * HIDDEN
    assert [(mods[f]["class"], mods[f]["parameter_bytes"])
            for f in (experts, f"{experts}.linear_fc1", f"{experts}.linear_fc2")] == [
        ("TEGroupedMLP", 4 * 2 * (2 * ffn * HIDDEN + ffn + HIDDEN)),
        ("TEColumnParallelGroupedLinear", 4 * 2 * (ffn * HIDDEN + ffn)),
        ("TERowParallelGroupedLinear", 4 * 2 * (HIDDEN * ffn + HIDDEN))]
    a = snap["allocations"]
    assert [a["bytes"][i] for i, op in enumerate(a["op"])
            if snap["ops"][op] == "te_grouped_gemm_workspace"] == [32 * 2**20 + 1024] * 4
