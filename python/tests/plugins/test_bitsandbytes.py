"""QLoRA with bitsandbytes on a simulated GPU (scripts/bitsandbytes/qlora_manual.py): a tiny
bf16 Llama whose decoder projections are `Linear4bit` (NF4, double quantization) quantized by
`.cuda()`, LoRA adapters of rank 32, the token embeddings trained too, bitsandbytes'
PagedAdamW8bit (one trace, shared), and int8 weights (scripts/bitsandbytes/int8_linear.py).
Every number below is derived from bitsandbytes' sources
(functional.quantize_4bit / quantize_blockwise, optim/optimizer.py Optimizer2State.init_state
and get_state_buffer) and read from the snapshot when the second optimizer step begins.
"""

import json
import math
from importlib.metadata import version

import pytest
from packaging.version import Version

from support.paths import TESTS
from support.ranks import CATEGORIES, _rows, model_state_bytes, op_allocations
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in a fresh process

SCRIPT = TESTS / "scripts" / "bitsandbytes" / "qlora_manual.py"
H, KV, F, LAYERS, VOCAB, R = 128, 64, 256, 2, 1000, 32
# (in, out) of q, k, v, o, gate, up, down: each a Linear4bit of out x in weights.
PROJECTIONS = [(H, H), (H, KV), (H, KV), (H, H), (H, F), (H, F), (F, H)]
WEIGHTS = [i * o for i, o in PROJECTIONS] * LAYERS  # elements of each 4-bit weight
# bitsandbytes 0.50 fused the forward's dequantization into its gemm_4bit op; 0.49's
# MatMul4Bit.forward calls F.dequantize_4bit, then F.linear (autograd/_functions.py).
FUSED_FORWARD = Version(version("bitsandbytes")) >= Version("0.50")


def quantized_weight_bytes(n: int) -> int:
    """One NF4 weight of n elements with double quantization: packed 2 per byte (uint8); its
    fp32 absmax per block of 64 quantized again to uint8 (n/64 bytes) with an fp32 absmax per
    block of 256 of those and an fp32 offset (their mean, 0-dim); the NF4 code (16 fp32) and
    the 8-bit dynamic code of the second quantization, copied per weight (256 fp32)."""
    return n // 2 + n // 64 + math.ceil(n / 64 / 256) * 4 + 4 + 16 * 4 + 256 * 4


# LoRA of rank R on each projection: A is R x in, B is out x R (fp32: PEFT keeps adapters in
# fp32 over a bf16 base).
LORA = [n for i, o in PROJECTIONS for n in (R * i, o * R)] * LAYERS
EMBEDDINGS = VOCAB * H  # bf16, trained


def adamw8bit_state_bytes(n: int) -> int:
    """Optimizer2State.init_state: under min_8bit_size (4096 elements) two fp32 states;
    otherwise two uint8 states and two fp32 absmax per block of 256."""
    if n < 4096:
        return 2 * 4 * n
    return 2 * n + 2 * math.ceil(n / 256) * 4


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qlora")
    snap = tmp / "snap.json"
    out = run_memlens("run", "--progress", "none", "--snapshot", str(snap), "--", str(SCRIPT),
                      "--lora-rank", str(R), "--train-embeddings", cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


def allocations_by(snap: dict, op: str, alive_at_end: bool):
    i = snap["ops"].index(op)
    return [r for r in _rows(snap) if r["op"] == i and (r["free_seq"] < 0) == alive_at_end]


def test_packed_weights_are_half_a_byte_per_element(traced):
    packed = allocations_by(traced, "bitsandbytes.quantize_4bit", alive_at_end=True)
    # q, o 128 x 128 -> 8,192 B; k, v 64 x 128 -> 4,096 B; gate, up, down 32,768 -> 16,384 B.
    assert sorted(r["requested_bytes"] for r in packed) == sorted(n // 2 for n in WEIGHTS)
    assert {CATEGORIES[r["category"]] for r in packed} == {"parameter"}
    # The first quantization's fp32 absmax (one per block of 64) lives only until it is
    # quantized again: n / 64 x 4 B each, freed.
    absmax = allocations_by(traced, "bitsandbytes.quantize_4bit", alive_at_end=False)
    assert sorted(r["requested_bytes"] for r in absmax) == sorted(n // 64 * 4 for n in WEIGHTS)


def test_model_state_of_qlora_with_paged_8bit_adamw(traced):
    base = (2 * VOCAB * H * 2  # embeddings and head, bf16
            + (2 * LAYERS + 1) * H * 2  # the norms, bf16
            + sum(quantized_weight_bytes(n) for n in WEIGHTS))
    assert sum(LORA) == 131072  # per layer 8,192 + 6,144 + 6,144 + 8,192 + 3 x 12,288
    # The 8-bit optimizer's two quantization maps (256 fp32 each), moved to the GPU once.
    qmaps = 2 * 256 * 4
    assert model_state_bytes(traced) == {
        "parameter": base + 4 * sum(LORA),
        "gradient": 4 * sum(LORA) + 2 * EMBEDDINGS,
        "optimizer_state": sum(adamw8bit_state_bytes(n) for n in LORA + [EMBEDDINGS]) + qmaps,
    }


def test_paged_states_are_booked_on_the_gpu_with_a_note(traced):
    # Only the embeddings' states reach the 1e5 elements that get_state_buffer pages: two
    # uint8 states of 128,000 B, allocated by the stand-in of F.get_paged.
    zeros = traced["ops"].index("zeros")
    paged = [r for r in _rows(traced) if r["op"] == zeros and r["requested_bytes"] == EMBEDDINGS
             and CATEGORIES[r["category"]] == "optimizer_state"]
    assert len(paged) == 2
    assert any("paged optimizer states" in n for n in traced["meta"]["notes"])


def dequantizing_sizes(snap: dict, op: str) -> list[int]:
    """Sizes of what `op` allocated during the first training step, sorted."""
    return sorted(op_allocations(snap, op))


def test_backward_dequantizes_each_weight_to_bf16(traced):
    # MatMul4Bit.backward: grad_A = grad_output @ dequantize_4bit(W), a bf16 copy of each
    # weight (2 B per element), once per weight per backward; before 0.50 the forward made
    # one too.
    passes = 1 if FUSED_FORWARD else 2
    assert dequantizing_sizes(traced, "bitsandbytes.dequantize_4bit") == sorted(
        2 * n for n in WEIGHTS * passes)


@pytest.mark.skipif(not FUSED_FORWARD, reason="bitsandbytes < 0.50 has no gemm_4bit: the "
                    "next test derives its forward")
def test_forward_dequantizes_each_weight_where_bitsandbytes_would(traced):
    # gemm_4bit on an H100 (sm90, 132 SMs): every weight here is under 4 MiB, none has
    # K * 2 < N, and each is under a quarter wave of 64-column blocks, so bitsandbytes' heuristic
    # keeps its fused kernel only up to M = 32 rows; the forward has M = 2 x 64 = 128 tokens:
    # the fallback runs. Per weight (in K, out N): the nested absmax dequantized to fp32 and
    # shifted by the offset (two buffers of N*K/64 floats), the weight dequantized to bf16
    # (2 N*K bytes), then the output (128 x N bf16).
    m = 2 * 64
    expected = []
    for k, n in PROJECTIONS * LAYERS:
        expected += [4 * n * k // 64, 4 * n * k // 64, 2 * n * k, 2 * m * n]
    assert dequantizing_sizes(traced, "bitsandbytes.gemm_4bit") == sorted(expected)


def test_every_dequantization_first_dequantizes_the_nested_absmax(traced):
    # F.dequantize_4bit with double quantization: dequantize_blockwise gives the fp32 absmax
    # (one per block of 64: N*K/64 floats), shifted by the offset in place. Once per weight in
    # the backward; before 0.50 in the forward too (from 0.50 gemm_4bit does it itself).
    passes = 1 if FUSED_FORWARD else 2
    assert dequantizing_sizes(traced, "bitsandbytes.dequantize_blockwise") == sorted(
        4 * n // 64 for n in WEIGHTS * passes)
    assert ("bitsandbytes.gemm_4bit" in traced["ops"]) == FUSED_FORWARD


def test_int8_weights_and_their_row_scales(tmp_path):
    snap = tmp_path / "snap.json"
    out = run_memlens("run", "--progress", "none", "--snapshot", str(snap), "--",
                      str(TESTS / "scripts" / "bitsandbytes" / "int8_linear.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    traced = json.loads(snap.read_text())
    # Linear8bitLt(256 -> 512): int8 weight 512 x 256 (1 B each) and its fp32 scale per row
    # (SCB, 512 x 4 B), fp16 bias 512 x 2 B; the fp16 head Linear(512 -> 8): 8 x 512 x 2 + 8 x 2.
    head = 8 * 512 * 2 + 8 * 2
    # Trained: the head, and Linear8bitLt's bias (it requires grad; the int8 weight does not).
    # AdamW8bit: the head's weight (4,096 elements) in 8 bits, its bias (8) in fp32, and the
    # two quantization maps.
    assert model_state_bytes(traced) == {
        "parameter": 512 * 256 + 512 * 4 + 512 * 2 + head,
        "gradient": head + 512 * 2,
        "optimizer_state": adamw8bit_state_bytes(8 * 512) + adamw8bit_state_bytes(8)
        + 2 * 256 * 4}
