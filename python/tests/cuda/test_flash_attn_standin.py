"""flash-attn where it is not installed (cuda/flash_attn_package.py, flash_attn_standin/): a
script that calls `flash_attn_func` itself (scripts/flash_attn/gqa_block.py) and a Hugging Face
Llama with `attn_implementation="flash_attention_2"` on a padded batch, which transformers
unpads for `flash_attn_varlen_func` (scripts/flash_attn/hf_padded_batch.py). What each
attention call allocates in the second training step is derived from FlashAttention-2's
mha_fwd / mha_bwd / mha_varlen_bwd (flash_api.cpp), the same code in flash-attn and in PyTorch:
the forward's output and fp32 log-sum-exp; the backward's dq/dk/dv, softmax_d and the fp32
dq_accum, with rows rounded to 128 (per sequence when packed), and dk/dv expanded to every
query head for grouped-query attention. (PyTorch's op also returns an 8-byte offset beside the
16-byte RNG state flash-attn keeps.)"""

import json

import pytest

from support.paths import TESTS
from support.ranks import op_allocations
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts" / "flash_attn"
NOTE = "flash-attn is not installed here"


def trace(tmp_path, script: str, env: dict | None = None) -> dict:
    snap = tmp_path / "snap.json"
    out = run_memlens("run", "--progress", "none", "--snapshot", str(snap), "--",
                      str(SCRIPTS / script), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


def test_flash_attn_func_with_grouped_query_attention(tmp_path):
    snap = trace(tmp_path, "gqa_block.py")
    assert any(n.startswith(NOTE) for n in snap["meta"]["notes"])
    b, s, h, kv, d, bf16, f32 = 4, 1000, 8, 2, 64, 2, 4
    rows = 1024  # seqlen rounded to 128
    # The key/value blocks are split no further: 4 x 8 x 16 row blocks fill the 2 x 132 slots.
    assert op_allocations(snap, "_flash_attention_forward") == [
        b * s * h * d * bf16, b * h * s * f32, 16, 8, 0]  # out, lse, RNG state, offset, no mask
    dq, dk = b * s * h * d * bf16, b * s * kv * d * bf16
    assert op_allocations(snap, "_flash_attention_backward") == [
        dq, dk, dk, b * h * rows * f32, b * rows * h * d * f32, dq, dq]


def test_a_transformers_model_on_a_padded_batch_runs_the_packed_kernels(tmp_path):
    snap = trace(tmp_path, "hf_padded_batch.py")
    assert any(n.startswith(NOTE) for n in snap["meta"]["notes"])
    # Llama of hidden 256: 8 query heads and 2 key/value heads of 32. The unpadded tokens
    # are the mask's 256 + 200 + 150 + 100: the mask came from the host, so its values are
    # known in the trace (engine/shadow_values.py). Per layer, 2 layers:
    total, batch, h, kv, d, bf16, f32 = 256 + 200 + 150 + 100, 4, 8, 2, 32, 2, 4
    rows = total + 128 * batch
    forward = [total * h * d * bf16, h * total * f32, 16, 8, 0]
    assert op_allocations(snap, "_flash_attention_forward") == forward * 2
    dq, dk = total * h * d * bf16, total * kv * d * bf16
    backward = [dq, dk, dk, h * rows * f32, rows * h * d * f32, dq, dq]
    assert op_allocations(snap, "_flash_attention_backward") == backward * 2


def test_an_installed_flash_attn_is_the_one_imported(tmp_path):
    """A flash_attn on the path (here a package whose function returns its query) is imported,
    not the stand-in: no note, and PyTorch's kernel never runs."""
    package = tmp_path / "site" / "flash_attn"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "def flash_attn_func(q, k, v, causal=False):\n    return q * 1\n")
    snap = trace(tmp_path, "gqa_block.py", env={"PYTHONPATH": str(tmp_path / "site")})
    assert not any(n.startswith(NOTE) for n in snap["meta"].get("notes", []))
    assert "_flash_attention_forward" not in snap["ops"]
