"""Context parallelism 2 with the Transformer Engine layer spec, TE not installed (2 ranks:
CP 2, TP 1, DP 1), against the same model at CP 1 (2 ranks: DP 2).

The TE-attention stand-in attends as TE's p2p ring does: each rank holds s/CP = 64 of the 128
tokens (Megatron's get_batch_on_this_cp_rank), so every sequence-dependent activation of a
layer halves. With fused attention Korthikanti's per-layer bytes (TP 1) are 34sbh (no 5as^2b
scores), plus the fp32 log-sum-exp 4asb; both are linear in s, so CP 2 is the formula at
s = 64: 34 x 64 x 2 x 256 + 4 x 8 x 64 x 2 = 1,118,208 B (CP 1: 2,236,416 B).
"""

from __future__ import annotations

import json

import pytest

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

WORLD, CP = 2, 2
GPT = M.Gpt()
LAYER = "module.module.decoder.layers.0"
TE = ("--spec", "te", "--steps", "2")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cp")
    return {"cp1": M.trace(tmp, WORLD, 0, *TE),
            **{f"cp2-rank{r}": M.trace(tmp, WORLD, r, *TE, "--cp", str(CP)) for r in (0, 1)}}


def test_korthikanti_at_s_over_cp():
    assert GPT.activation_bytes(1, False, "none", flash=True) == 2_236_416
    assert M.Gpt(seq=GPT.seq // CP).activation_bytes(1, False, "none", flash=True) == 1_118_208


@pytest.mark.parametrize("rank", (0, 1))
def test_layer_activations_halve_with_cp_2(traces, rank):
    """Both CP ranks (rank 1's causal ring steps differ from rank 0's, its saved tensors do
    not) hold Korthikanti's bytes at s/CP within 1 %, and half of what CP 1 holds (the only
    difference: a few bytes of constant size, the dropout RNG state)."""
    cp1 = M.layer_activation_bytes(traces["cp1"], LAYER)
    cp2 = M.layer_activation_bytes(traces[f"cp2-rank{rank}"], LAYER)
    expected = M.Gpt(seq=GPT.seq // CP).activation_bytes(1, False, "none", flash=True)
    assert cp2 == pytest.approx(expected, rel=0.01) and cp2 >= expected
    assert cp2 == pytest.approx(cp1 / 2, abs=64)


def test_model_states_do_not_change_and_cp_is_noted(traces):
    """CP splits the sequence, not the weights: 18 B x 3,716,608 parameters on every rank."""
    for snap in traces.values():
        assert sum(M.model_state_bytes(snap).values()) == 18 * GPT.stage_params(1, 1, 0)
    notes = traces["cp2-rank0"]["meta"]["notes"]
    assert any(n.startswith("context parallelism 2: core attention holds what TE's p2p ring")
               for n in notes), notes


def test_unfused_backend_with_cp_says_what_te_supports(memlens, tmp_path):
    out = memlens("run", "--world-size", "2", "--rank", "0", "--json", "--no-snapshot", "--",
                  str(M.SCRIPT), *TE, "--cp", "2", "--attention-backend", "unfused",
                  cwd=tmp_path)
    assert out.returncode != 0
    error = json.loads(out.stdout.strip().splitlines()[-1])["error"]
    assert "with context parallelism 2" in error["message"]
    assert "flash and fused backends only" in error["message"]
