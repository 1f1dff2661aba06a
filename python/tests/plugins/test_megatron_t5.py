"""T5 on Transformer Engine's block specs where TE is absent (megatron.core alone: our
t5_core_train.py; Megatron-LM's pretrain_t5.py builds the local specs once memlens turns its
--transformer-impl to local, which the same patch covers)."""

from __future__ import annotations

import pytest

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

SCRIPT = M.SCRIPT.parent / "t5_core_train.py"
LAYERS = 2


def test_t5_te_block_specs_run_as_te_holds_memory(tmp_path):
    """Every core attention (the encoder's, the decoder's self and cross attention: 2 + 2 x 2)
    holds what TE's attention holds (the flash stand-in, backend auto), and the layers' GEMMs
    take TE's one workspace (32 MiB + 1 KiB on an H100) while T5's output layer, Megatron's own
    ColumnParallelLinear on a GPU too, keeps PyTorch's two (forward, autograd's thread).
    Megatron's CI T5 configurations with the TE spec came 25 MB short of their H100 values
    after the step when these were the local spec's."""
    snap = M.trace(tmp_path, 1, 0, "--layers", str(LAYERS), script=SCRIPT)
    attention = [m["class"] for m in snap["modules"] if m["fqn"].endswith("core_attention")]
    assert attention == ["FlashDotProductAttention"] * (LAYERS + 2 * LAYERS)
    assert M.workspaces(snap) == M.TORCH_AND_TE_WORKSPACES


def test_te_unfused_attention_softmax_backward_is_in_place(tmp_path):
    """TE's unfused attention with the fused softmax kernels (Megatron-LM's default): the
    encoder's padding-masked softmax (its scores [b, heads, s, s] = 2 x 8 x 128 x 128 bf16,
    524,288 B) makes its probabilities in forward, and TE's backward writes the scores'
    gradient into the probabilities' gradient in place, where apex's masked kernel, which
    Megatron's local attention calls, makes a new one. Per encoder layer and step: one in
    forward, none in backward."""
    snap = M.trace(tmp_path, 1, 0, "--layers", str(LAYERS), "--attention-backend", "unfused",
                   "--masked-softmax-fusion", script=SCRIPT)
    scores = 2 * 8 * 128 * 128 * 2
    softmax = {i for i, m in enumerate(snap["modules"])
               if ".encoder." in m["fqn"] and m["fqn"].endswith("scale_mask_softmax")}
    made = [r["backward"] for r in M._rows(snap)
            if r["module"] in softmax and r["requested_bytes"] == scores]
    assert sorted(made) == [False] * (LAYERS * 2)  # two steps, no backward allocation
