"""Context parallelism 2 with the Transformer Engine layer spec, TE not installed (2 ranks:
CP 2, TP 1, DP 1), against the same model at CP 1 (2 ranks: DP 2).

The TE-attention stand-in attends as TE's p2p ring does: each rank holds s/CP = 64 of the 128
tokens (Megatron's get_batch_on_this_cp_rank), so every sequence-dependent activation of a
layer halves. With fused attention Korthikanti's per-layer bytes (TP 1) are 34sbh (no 5as^2b
scores), plus the fp32 log-sum-exp 4asb; both are linear in s, so CP 2 is the formula at
s = 64: 34 x 64 x 2 x 256 + 4 x 8 x 64 x 2 = 1,118,208 B (CP 1: 2,236,416 B).

With a Megatron-LM checkout at core_v0.16.1 (MEMLENS_MEGATRON_LM, as in test_megatron_lm.py),
Megatron's CI configuration gpt3_mcore_te_tp2_pp2_cp2 (TP 2, PP 2, CP 2, TE spec) is traced for
the rank that logs memory, the last one, against the H100 golden values of that tag.

CP 4 as a hierarchy (`cp_comm_type` a2a+p2p: an all-to-all within pairs, then a ring of two)
keeps the same bytes per layer, and exchanges what TE's all-to-all exchanges; CP 4 as one
all-to-all (`a2a`) keeps its kernel's output too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def _workspaces(snap: dict) -> dict[str, list[tuple[int, bool]]]:
    """The cuBLAS workspaces a trace took (op name -> [(bytes, in backward)]): never freed."""
    a = snap["allocations"]
    device = a["devices"].index(snap["meta"]["device_key"])
    out: dict[str, list] = {}
    for i, op in enumerate(a["op"]):
        name = snap["ops"][op]
        if a["device"][i] == device and name.endswith("cublas_workspace"):
            assert a["free_seq"][i] < 0
            out.setdefault(name, []).append((a["bytes"][i], bool(a["backward"][i])))
    return out


def test_te_layers_take_te_gemm_workspace(traces):
    """TE's linear layers run their GEMMs on TE's own cuBLASLt workspace (TE 2.10's
    get_cublas_workspace: lru-cached, one per device, made at the first GEMM, of 32 MiB + 1 KiB
    on compute capability 9.0, the default H100), shared by forward and backward; PyTorch's
    workspace of a thread's handle (32 MiB on sm90) only for the output layer, Megatron's own
    ColumnParallelLinear: one for forward (main thread), one for backward (autograd's)."""
    for snap in traces.values():
        assert _workspaces(snap) == {
            "te_cublas_workspace": [(32 * 2**20 + 1024, False)],
            "cublas_workspace": [(32 * 2**20, False), (32 * 2**20, True)]}, \
            snap["meta"]["notes"]


# -- all-to-all context parallelism: a2a+p2p and a2a ------------------------------------------
A2A_P2P = ("--cp", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-cp", "2", "2")
CORE_ATTENTION = LAYER + ".self_attention.core_attention"


@pytest.fixture(scope="module")
def a2a_p2p(tmp_path_factory):
    """CP 4 as a 2 x 2 hierarchy (4 ranks: CP 4), rank 0."""
    return M.trace(tmp_path_factory.mktemp("a2a"), 4, 0, *TE, *A2A_P2P)


def test_a2a_p2p_layer_holds_the_formula_at_s_over_cp(a2a_p2p):
    """The all-to-all trades heads for tokens (2 x s/4 tokens of half the heads, the same
    bytes), so a layer keeps what the p2p ring at CP 4 keeps: Korthikanti's bytes at s/4, with
    the same few bytes of constant size."""
    expected = M.Gpt(seq=GPT.seq // 4).activation_bytes(1, False, "none", flash=True)
    assert expected == 559_104
    held = M.layer_activation_bytes(a2a_p2p, LAYER)
    assert held == pytest.approx(expected, rel=0.01) and held >= expected
    notes = a2a_p2p["meta"]["notes"]
    assert any(n.startswith("context parallelism 4 (a2a+p2p, 2 x 2)") for n in notes), notes


def test_a2a_p2p_exchanges_q_k_v_and_the_output(a2a_p2p):
    """Each forward of core attention receives q, k, v and the output through the all-to-all
    (TE's `empty_like` receive buffers, each of b x s/CP x h x d x 2 = 32 KiB) beside the
    merged ring output of that size; backward receives the output and its gradient, then dq,
    dk and dv. Nothing of the exchange outlives the call that made it but what autograd
    saves (checked above)."""
    q_bytes = GPT.micro_batch * (GPT.seq // 4) * GPT.hidden * 2
    assert q_bytes == 32 * 1024
    calls = 2  # two steps of one micro-batch (no pipeline)
    assert _receive_buffers(a2a_p2p, q_bytes) == (calls * (4 + 1), calls * (2 + 1 + 3))


def _receive_buffers(snap: dict, nbytes: int) -> tuple[int, int]:
    """`empty_like` allocations of `nbytes` by layer 0's core attention: (forward,
    backward)."""
    a = snap["allocations"]
    device = a["devices"].index(snap["meta"]["device_key"])
    module = [m["fqn"] for m in snap["modules"]].index(CORE_ATTENTION)
    forwards = backwards = 0
    for i, op in enumerate(a["op"]):
        if a["device"][i] == device and a["module"][i] == module and \
                snap["ops"][op] == "empty_like" and a["requested_bytes"][i] == nbytes:
            if a["backward"][i]:
                backwards += 1
            else:
                forwards += 1
    return forwards, backwards


@pytest.fixture(scope="module")
def a2a(tmp_path_factory):
    """CP 4 as one all-to-all (`cp_comm_type` a2a, 4 ranks), rank 0."""
    return M.trace(tmp_path_factory.mktemp("ulysses"), 4, 0, *TE, "--cp", "4",
                   "--cp-comm-type", "a2a")


def test_a2a_layer_also_keeps_the_output_before_its_exchange(a2a, a2a_p2p):
    """TE's all-to-all attention saves q, k, v of the whole sequence of a quarter of the heads
    (the same bytes as the ring's) and its kernel's output before the exchange back, which
    the ring does not keep: b x s/CP x h x 2 = 32 KiB more per layer. Each forward receives
    q, k, v and the output (no ring buffers); each backward the output's gradient, then dq,
    dk and dv, beside dq, dk and dv themselves."""
    q_bytes = GPT.micro_batch * (GPT.seq // 4) * GPT.hidden * 2
    assert M.layer_activation_bytes(a2a, LAYER) - M.layer_activation_bytes(a2a_p2p, LAYER) \
        == q_bytes
    assert _receive_buffers(a2a, q_bytes) == (2 * 4, 2 * (1 + 3 + 3))
    notes = a2a["meta"]["notes"]
    assert any(n.startswith("context parallelism 4 (a2a): ") for n in notes), notes


def test_a2a_with_heads_that_do_not_divide_says_so(memlens, tmp_path):
    """8 heads divide over the all-to-all's 4 ranks, 2 query groups do not: the configuration
    TE rejects on a GPU stops with the numbers, not a failed view."""
    out = memlens("run", "--world-size", "4", "--rank", "0", "--json", "--no-snapshot", "--",
                  str(M.SCRIPT), *TE, "--cp", "4", "--cp-comm-type", "a2a",
                  "--query-groups", "2", cwd=tmp_path)
    assert out.returncode != 0
    message = json.loads(out.stdout.strip().splitlines()[-1])["error"]["message"]
    assert "cp_comm_type a2a: the all-to-all splits each rank's 8 attention heads and 2 query " \
           "groups over 4 ranks" in message, message


# -- Megatron-LM's CI configuration, against its GPU measurement -------------------------------
CHECKOUT = os.environ.get("MEMLENS_MEGATRON_LM")
# tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp2_cp2/model_config.yaml at
# core_v0.16.1; data, checkpoint and TensorBoard paths are replaced in a trace.
CI_CP2 = """--num-layers 12 --hidden-size 512 --num-attention-heads 8 --log-params-norm
--log-num-zeros-in-grad --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard
--tensorboard-dir tb --micro-batch-size 4 --global-batch-size 32 --seq-length 1024
--max-position-embeddings 1024 --train-iters 50 --timing-log-level 0 --lr-decay-iters 320000
--save ckpt --load ckpt --data-path data/my-gpt3_00_text_document --vocab-file data/vocab.json
--merge-file data/merges.txt --split 949,50,1 --distributed-backend nccl --lr 0.00015
--lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 1e-2 --clip-grad 1.0
--lr-warmup-fraction .01 --log-interval 1 --save-interval 10000 --eval-interval 1000
--eval-iters 10 --transformer-impl transformer_engine --tensor-model-parallel-size 2
--pipeline-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel
--hidden-dropout 0.0 --attention-dropout 0.0 --no-gradient-accumulation-fusion
--attention-softmax-in-fp32 --use-mcore-models --ckpt-format torch_dist
--dist-ckpt-strictness log_all --data-cache-path cache --bf16 --attention-backend flash
--log-memory-to-tensorboard""".split()
# golden_values_dev_dgx_h100.json of that configuration at core_v0.16.1: rank 7 (the last,
# which logs memory) after each step (mem-allocated-bytes) and its running peak
# (mem-max-allocated-bytes) after steps 1 and 3 (steps 3 to 50: the same).
GOLDEN_AFTER_STEP, GOLDEN_PEAK_STEP_1, GOLDEN_PEAK = 510_689_792, 757_802_496, 938_397_696


@pytest.mark.skipif(not CHECKOUT or not Path(CHECKOUT or ".", "pretrain_gpt.py").is_file(),
                    reason="set MEMLENS_MEGATRON_LM to a Megatron-LM checkout at core_v0.16.1")
def test_ci_configuration_tp2_pp2_cp2_last_rank_against_h100_golden_values(tmp_path):
    """What is alive after a step (model states, TE's and PyTorch's two cuBLAS workspaces)
    equals the H100 measurement within one 512-byte block; the peaks (the last stage's
    vocabulary-parallel cross entropy, at the second micro-batch of the step) are within 1 %
    below it."""
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (
               os.environ.get("MEMLENS_MEGATRON_LM_DEPS", ""), CHECKOUT,
               os.environ.get("PYTHONPATH", "")) if p)}
    snap = M.trace(tmp_path, 8, 7, *CI_CP2, script=Path(CHECKOUT, "pretrain_gpt.py"), env=env)
    phases = {p["name"]: p for p in snap["phases"] if p["device"] == "cuda:7"}
    after = phases["optimizer_step_iter_1"]["current_after_bytes"]
    assert after == pytest.approx(GOLDEN_AFTER_STEP, abs=512)
    assert phases["forward_backward_iter_0"]["peak_bytes"] == \
        pytest.approx(GOLDEN_PEAK_STEP_1, rel=0.01)
    assert snap["summary"]["peak_bytes"] == pytest.approx(GOLDEN_PEAK, rel=0.01)
    assert snap["summary"]["peak_bytes"] < GOLDEN_PEAK


def test_unfused_backend_with_cp_says_what_te_supports(memlens, tmp_path):
    out = memlens("run", "--world-size", "2", "--rank", "0", "--json", "--no-snapshot", "--",
                  str(M.SCRIPT), *TE, "--cp", "2", "--attention-backend", "unfused",
                  cwd=tmp_path)
    assert out.returncode != 0
    error = json.loads(out.stdout.strip().splitlines()[-1])["error"]
    assert "with context parallelism 2" in error["message"]
    assert "flash and fused backends only" in error["message"]
