"""CUDA targets against exact formulas (no GPU needed): activation bytes of a transformer layer
(Korthikanti et al. 2022) and mixed-precision model states (ZeRO paper: 16 bytes/parameter).

Per-layer activations are measured as half the difference between traces of 4 and 2 layers,
at the moment activations peak. Each formula holds exactly for the bytes the ops request. The
allocated bytes are whole blocks of the caching allocator, which keeps up to 1 MiB of slack in
a large block it does not split (REFERENCES §3), so they may differ by that much per layer.
"""

import json

import pytest

from support.paths import TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = str(TESTS / "scripts" / "korthikanti_layer.py")
S, B, H, A = 1024, 1, 768, 12
SBH = S * B * H
MiB = 2**20
SLACK = 2 * MiB  # a layer's activations sit in blocks that may each keep < 1 MiB unsplit
LN_STATS = 2 * 2 * S * B * 4  # two LayerNorms save mean and rstd, fp32, per token
ACTIVATION = 4


def activation_peak(snapshot: dict, key: str) -> int:
    """Most activation bytes alive at once on the GPU, counting `key` of each allocation."""
    alloc = snapshot["allocations"]
    gpu = alloc["devices"].index(snapshot["meta"]["device_key"])
    events = []
    for i, cat in enumerate(alloc["category"]):
        if cat == ACTIVATION and alloc["device"][i] == gpu:
            events.append((alloc["alloc_seq"][i], alloc[key][i]))
            if alloc["free_seq"][i] >= 0:
                events.append((alloc["free_seq"][i], -alloc[key][i]))
    current = peak = 0
    for _, delta in sorted(events):
        current += delta
        peak = max(peak, current)
    return peak


def per_layer(memlens, tmp_path, *args):
    result = {}
    for layers in (2, 4):
        path = tmp_path / f"l{layers}.json"
        out = memlens("run", "--device", "h100-80gb", "--snapshot", str(path), "--", SCRIPT,
                      "--layers", str(layers), *args)
        assert out.returncode == 0, out.stderr[-3000:]
        result[layers] = json.loads(path.read_text())
    requested = (activation_peak(result[4], "requested_bytes")
                 - activation_peak(result[2], "requested_bytes")) // 2
    allocated = (activation_peak(result[4], "bytes") - activation_peak(result[2], "bytes")) / 2
    return requested, allocated, result[4]


def test_eager_attention_with_dropout_is_34sbh_plus_5as2b(memlens, tmp_path):
    requested, allocated, _ = per_layer(memlens, tmp_path)
    expected = SBH * (34 + 5 * A * S / H) + LN_STATS  # sbh(34 + 5as/h) = 114 sbh here
    assert requested == expected == 89_669_632
    assert abs(allocated - expected) <= SLACK


def test_flash_attention_drops_the_scores_and_keeps_an_fp32_logsumexp(memlens, tmp_path):
    requested, allocated, snap = per_layer(memlens, tmp_path, "--attention", "sdpa")
    assert snap["meta"]["kernels"]["scaled_dot_product_attention"] == {"flash": 8}
    # The 5as²b term is gone; flash saves its output (which is the output projection's input,
    # 2sbh already in the 34) plus the fp32 logsumexp (4·a·s·b) and its 16 + 8 B Philox state.
    expected = SBH * 34 + 4 * A * S * B + 24 + LN_STATS
    assert requested == expected
    assert abs(allocated - expected) <= SLACK


def test_without_dropout_the_masks_disappear(memlens, tmp_path):
    requested, allocated, _ = per_layer(memlens, tmp_path, "--dropout", "0")
    # No masks (2sbh of 1-byte masks after the projections, as²b on the probabilities), and the
    # probabilities are the softmax output itself: 32sbh + 2as²b.
    expected = SBH * 32 + 2 * A * S * S * B + LN_STATS
    assert requested == expected
    assert abs(allocated - expected) <= SLACK


def test_mixed_precision_adamw_model_states_are_16_bytes_per_parameter(memlens):
    """fp32 weights (4 B), fp32 gradients (4 B), AdamW's exp_avg and exp_avg_sq (8 B): 16 B per
    parameter on the GPU. AdamW's `step` counters live on the CPU (not fused, not capturable),
    and the bf16 weight copies autocast makes are activations, not model state."""
    out = memlens("run", "--device", "h100-80gb", "--json", "--no-snapshot", "--",
                  str(TESTS / "scripts" / "mixed_precision.py"))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    psi = 4 * (1024 * 1024 + 1024)
    peaks = data["category_peaks"]
    assert peaks["parameter"] + peaks["gradient"] + peaks["optimizer_state"] == 16 * psi
    assert (peaks["parameter"], peaks["gradient"], peaks["optimizer_state"]) == (
        4 * psi, 4 * psi, 8 * psi)
