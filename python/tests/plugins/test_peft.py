"""PEFT adapters (LoRA, DoRA, IA3) on a tiny Llama built from its config
(scripts/peft/lora_llama.py): the frozen base is booked as parameters with no gradients and no
optimizer state; gradients and AdamW's two moments cover the adapter's parameters only.

PEFT is pure PyTorch: nothing of it is patched. Bytes are read when the second optimizer step
begins (support.ranks.model_state_bytes): fp32, 4 B per parameter; AdamW (not fused, not
capturable) keeps exp_avg and exp_avg_sq on the GPU (8 B per trainable parameter) and its
`step` counters on the CPU.
"""

import json

import pytest

from support.paths import TESTS
from support.ranks import model_state_bytes
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "peft" / "lora_llama.py"

# The script's Llama: hidden 128, 4 heads of 32 with 2 key/value heads (k and v are 128 -> 64),
# MLP 128 -> 256 -> 128, 2 layers, vocabulary 1,000, untied head.
H, KV, F, LAYERS, VOCAB = 128, 64, 256, 2, 1000
# (in, out) of each adapted projection: q, k, v, o, gate, up, down.
PROJECTIONS = [(H, H), (H, KV), (H, KV), (H, H), (H, F), (H, F), (F, H)]
# Base: embeddings and head 2 x 1000 x 128; per layer the projections' weights (no biases) and
# two norms of 128; a final norm of 128.
BASE = 2 * VOCAB * H + LAYERS * (sum(i * o for i, o in PROJECTIONS) + 2 * H) + H
R = 8


def lora(i: int, o: int) -> int:  # A: r x in, B: out x r
    return R * i + o * R


# DoRA adds a magnitude vector of `out` per adapted projection.
# IA3 scales each projection's output (a vector of `out`), except feed-forward modules
# (down_proj here), whose input it scales (a vector of `in`).
TRAINABLE = {
    "lora": LAYERS * sum(lora(i, o) for i, o in PROJECTIONS),
    "dora": LAYERS * sum(lora(i, o) + o for i, o in PROJECTIONS),
    "ia3": LAYERS * (sum(o for _, o in PROJECTIONS[:-1]) + PROJECTIONS[-1][0]),
}


@pytest.fixture(scope="module", params=sorted(TRAINABLE))
def traced(request, tmp_path_factory):
    """(adapter, what the script printed, snapshot), one trace per adapter."""
    tmp = tmp_path_factory.mktemp(request.param)
    snap = tmp / "snap.json"
    out = run_memlens("run", "--progress", "none", "--snapshot", str(snap), "--", str(SCRIPT),
                      "--adapter", request.param, cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return request.param, out.stdout, json.loads(snap.read_text())


def test_the_hand_count_is_peft_own(traced):
    adapter, stdout, _ = traced
    # LoRA: per layer 2048 + 1536 + 1536 + 2048 + 3 x 3072 = 16,384, x 2 layers.
    assert TRAINABLE["lora"] == 32768 and BASE == 551552
    assert (f"trainable params: {TRAINABLE[adapter]:,} || "
            f"all params: {BASE + TRAINABLE[adapter]:,}") in stdout


def test_frozen_base_has_no_gradient_or_optimizer_state(traced):
    adapter, _, snap = traced
    n = TRAINABLE[adapter]
    assert model_state_bytes(snap) == {"parameter": 4 * (BASE + n), "gradient": 4 * n,
                                       "optimizer_state": 8 * n}
    # set_to_none: no gradient is alive when the second step's forward begins.
    assert model_state_bytes(snap, "forward_backward_iter_1")["gradient"] == 0
