"""Megatron's fine-grained activation offloading (`offload_modules`) in a trace: the tensors a
named module saves for backward go to pinned host memory and come back for its backward
(plugins/megatron/activation_offload.py). One rank, the TE spec (core attention as TE's flash
attention holds it), 2 layers, one micro-batch.

What layer 0's core attention keeps for backward, derived (s = 128, b = 2, h = 256, 8 heads):
its copies of q, k and v, [s, b, h] bf16, 131,072 B each; its output, the same size; the fp32
log-sum-exp [b, heads, s], 8,192 B; the kernel's RNG seed and offset, 16 B and 8 B. With
`core_attn` offloaded, all of them leave the device before backward but the output, which the
output projection keeps too. Layer 1's stay: Megatron keeps the last group of each name on the
device (its "offload margin", so that reloading it does not stall the compute stream)."""

from __future__ import annotations

import pytest

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

GPT = M.Gpt(layers=2)
FLAGS = ("--layers", "2", "--spec", "te", "--steps", "2")
QKV = GPT.seq * GPT.micro_batch * GPT.hidden * 2  # 131,072
LSE = GPT.micro_batch * GPT.heads * GPT.seq * 4  # 8,192
SAVED = sorted([QKV] * 4 + [LSE, 16, 8])


def core_attention(layer: int) -> str:
    return f"module.module.decoder.layers.{layer}.self_attention.core_attention"


def test_offloaded_core_attention_keeps_only_its_output_on_the_device(tmp_path):
    base = M.trace(tmp_path, 1, 0, *FLAGS)
    off = M.trace(tmp_path, 1, 0, *FLAGS, "--offload-modules", "core_attn")
    assert sorted(M.kept_into_backward(base, core_attention(0))) == SAVED
    assert M.kept_into_backward(off, core_attention(0)) == [QKV]
    for snap in (base, off):  # the last layer's group stays on the device
        assert sorted(M.kept_into_backward(snap, core_attention(1))) == SAVED
    # and what left is on the host: Megatron's pinned pool holds one of each size
    a = off["allocations"]
    host = a["devices"].index("cpu")
    pooled = {a["requested_bytes"][i] for i in range(len(a["bytes"])) if a["device"][i] == host
              and off["ops"][a["op"][i]] == "empty" and a["free_seq"][i] < 0}
    assert {QKV, LSE, 16, 8} <= pooled
