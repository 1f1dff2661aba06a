"""A small GPT built with megatron.core alone (TP 2, PP 2, DP 2: 8 ranks; Megatron's DDP, its
optimizer and pipeline schedules) traced for rank 0 and for the last pipeline rank.

- Model states equal Megatron's accounting exactly: 18 B/param, or 6 + 12/DP with the
  distributed optimizer, for that rank's parameters (counted from the configuration).
- Activations per layer and micro-batch are within 1 % of Korthikanti et al. for the
  TP / SP / recompute setting. The script meets the formula's conditions (16-bit activations,
  GeLU MLP of 4h with biases, LayerNorm, unfused attention, dropout with 1-byte masks); what
  is left is what the formula ignores: LayerNorm statistics (16 sb bytes per layer, 0.2 %).
  The layer measured is the first of its stage: its output is saved by the next layer on the
  same rank (the last layer's output is sent to the next stage instead).
"""

from __future__ import annotations

import sys

import pytest
import torch

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

WORLD, TP, PP, DP = 8, 2, 2, 2
LAST = WORLD - 1  # Megatron's default order puts the pipeline outermost: ranks 4-7 are stage 1
GPT = M.Gpt()
LAYER = "module.module.decoder.layers.0"
SETTINGS = {
    # name: (script flags, SP, recompute, distributed optimizer)
    "tp": ((), False, "none", False),
    "tp-sp-distopt": (("--sp", "--distributed-optimizer"), True, "none", True),
    "tp-selective": (("--recompute", "selective"), False, "selective", False),
    "tp-sp-selective": (("--sp", "--recompute", "selective"), True, "selective", False),
    "full-recompute": (("--recompute", "full"), False, "full", False),
    # Zero-centered gamma (Megatron-LM's --apply-layernorm-1p), which torch's norm refuses:
    # apex's and TE's fused norms add the 1 inside the kernel, nothing more held.
    "tp-layernorm-1p": (("--layernorm-1p",), False, "none", False),
    # The Transformer Engine layer spec without TE installed: fused attention's memory.
    "te-spec-flash": (("--spec", "te"), False, "none", False),
    # Grouped-query attention, 2 query groups per TP rank (4 in all, for 8 heads): K and V
    # have half the heads. Megatron's reshape of the query is then a copy; TE keeps its own
    # bshd copies of q, k, v, not the fused QKV output nor that query copy.
    "te-spec-flash-gqa": (("--spec", "te", "--query-groups", "4"), False, "none", False),
    # --attention-backend with the TE spec: unfused and local keep the s x s scores (5as^2b,
    # as Korthikanti counts them); fused (cuDNN) keeps what flash keeps.
    "te-spec-unfused": (("--spec", "te", "--attention-backend", "unfused"), False, "none", False),
    "te-spec-local": (("--spec", "te", "--attention-backend", "local"), False, "none", False),
    "te-spec-fused": (("--spec", "te", "--attention-backend", "fused"), False, "none", False),
    # A learnable softmax offset per head (gpt-oss's attention sinks), which TE's fused backend
    # takes; DDP's overlapped reduction counts every parameter's gradient in its first step.
    "te-spec-sinks": (("--spec", "te", "--softmax-type", "learnable", "--overlap-grad-reduce"),
                      False, "none", False),
    # The output layer's weight gradient deferred to the pipeline flush: TE's linear layers
    # ignore the option (memlens' stand-ins for them failed on it).
    "te-spec-deferred-wgrad": (("--spec", "te", "--grad-accum-fusion", "--defer-embedding-wgrad"),
                               False, "none", False),
    # Megatron's ModelOpt spec (its post-training `--export-*` path): local linear layers with
    # TE's norms and core attention, which it cannot build without TE.
    "modelopt-spec-flash": (("--spec", "modelopt"), False, "none", False),
}
GROUPS = {"te-spec-flash-gqa": 4}
# Multi-latent attention (gpt_core_train.py --mla: q and k heads of 32 + 16 rotary dims, v heads
# of 32), TE spec: TE's fused backend (auto) and its unfused one.
MLA = {"te-spec-mla": ("--spec", "te", "--mla"),
       "te-spec-mla-unfused": ("--spec", "te", "--mla", "--attention-backend", "unfused")}
FUSED_ATTENTION = {"te-spec-flash", "te-spec-flash-gqa", "te-spec-fused", "te-spec-sinks",
                   "te-spec-deferred-wgrad", "modelopt-spec-flash"}
# Gradient-accumulation fusion: TE's cached dummy weight gradients, which Megatron's linear
# layers take where TE is installed (as on a GPU).
TE_DUMMY_WGRADS = {"te-spec-deferred-wgrad"}
RANKS = {"tp": (0, LAST), "tp-sp-distopt": (0, LAST), "tp-layernorm-1p": (0,),
         "te-spec-deferred-wgrad": (LAST,), "modelopt-spec-flash": (0,)}


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("megatron")
    cache: dict = {}

    def get(setting: str, rank: int) -> dict:
        if (setting, rank) not in cache:
            flags = MLA[setting] if setting in MLA else SETTINGS[setting][0]
            cache[setting, rank] = M.trace(tmp, WORLD, rank, "--tp", str(TP), "--pp", str(PP),
                                           *flags)
        return cache[setting, rank]

    return get


def _stage(rank: int) -> int:
    return rank // (WORLD // PP)


@pytest.mark.parametrize("setting,rank", [(s, r) for s, ranks in RANKS.items() for r in ranks])
def test_model_states_equal_megatrons_accounting(snapshots, setting, rank):
    _, _, _, distributed_optimizer = SETTINGS[setting]
    snap = snapshots(setting, rank)
    params = GPT.stage_params(TP, PP, _stage(rank))
    got = M.model_state_bytes(snap)
    assert got["parameter"] == 2 * params
    dummies = GPT.te_dummy_wgrad_bytes(TP, _stage(rank) == PP - 1) \
        if setting in TE_DUMMY_WGRADS else 0
    assert got["gradient"] == 4 * params + dummies
    assert sum(got.values()) == \
        M.megatron_model_state_bytes(params, DP, distributed_optimizer) + dummies


@pytest.mark.parametrize("setting,rank", [(s, r) for s in SETTINGS for r in RANKS.get(s, (0,))])
def test_activations_per_layer_match_korthikanti(snapshots, setting, rank):
    _, sp, recompute, _ = SETTINGS[setting]
    snap = snapshots(setting, rank)
    microbatches = M.in_flight_microbatches(PP, _stage(rank), microbatches=PP)
    per_layer = M.layer_activation_bytes(snap, LAYER) / microbatches
    expected = GPT.activation_bytes(TP, sp, recompute, flash=setting in FUSED_ATTENTION,
                                    groups=GROUPS.get(setting))
    assert per_layer == pytest.approx(expected, rel=0.01), (setting, per_layer, expected)
    assert per_layer >= expected  # what the formula leaves out is only ever more


def test_optimizer_step_is_fused_adams(snapshots):
    """Without TE and apex Megatron would run torch's foreach Adam, whose `_foreach_sqrt`
    makes an fp32 copy of every exp_avg_sq each step: 4 B x 955,136 parameters = 3,820,544 B
    of temporaries on rank 0. A GPU job's FusedAdam updates in place: what a step allocates
    is the gradient norm's scalars (220 B here), and none of it belongs to a module."""
    snap = snapshots("tp", 0)
    phase = M._phase(snap, "optimizer_step_iter_1")
    made = [r for r in M._rows(snap) if phase["start_seq"] <= r["alloc_seq"] < phase["end_seq"]]
    temporaries = [r for r in made if M.CATEGORIES[r["category"]] == "temporary"]
    assert sum(r["requested_bytes"] for r in temporaries) < 4096
    assert all(r["module"] < 0 for r in temporaries)
    assert phase["peak_bytes"] - phase["current_before_bytes"] < 16384
    assert any("FusedAdam" in n for n in snap["meta"]["notes"])


def test_phases_follow_megatrons_structure(snapshots):
    snap = snapshots("tp", 0)
    names = [p["name"] for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]]
    assert names == ["setup_model_and_optimizer", "forward_backward_iter_0",
                     "optimizer_step_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1"]
    assert snap["meta"]["stopped_after_iterations"] is True


def test_each_rank_uses_its_own_gpu(snapshots):
    assert snapshots("tp", 0)["meta"]["device_key"] == "cuda:0"
    assert snapshots("tp", LAST)["meta"]["device_key"] == f"cuda:{LAST}"


def test_sequence_parallel_with_torch_norms_is_noted(snapshots):
    notes = snapshots("tp-sp-distopt", 0)["meta"].get("notes", [])
    assert any("sequence-parallel" in n for n in notes), notes


def test_zero_centered_gamma_is_noted_and_holds_what_a_plain_norm_holds(snapshots):
    one_p, plain = snapshots("tp-layernorm-1p", 0), snapshots("tp", 0)
    assert any("zero-centered gamma" in n for n in one_p["meta"]["notes"])
    assert M.model_state_bytes(one_p) == M.model_state_bytes(plain)
    assert M.layer_activation_bytes(one_p, LAYER) == M.layer_activation_bytes(plain, LAYER)


def test_te_spec_without_te_is_noted_and_uses_fused_attention(snapshots):
    snap = snapshots("te-spec-flash", 0)
    assert any("Transformer Engine is not installed" in n for n in snap["meta"]["notes"])
    classes = {m["class"] for m in snap["modules"] if m["fqn"].endswith("core_attention")}
    assert classes == {"FlashDotProductAttention"}


def test_modelopt_spec_builds_te_norms_and_attention_from_stand_ins(snapshots):
    """ModelOpt's spec raises ImportError without TE (its `Norm`) and takes TE's core
    attention: the layers get Megatron's torch norm and the fused-attention stand-in, their
    linear layers stay Megatron's own (no TE GEMM workspace), and the model holds the
    parameters of the TE spec's model (checked above, with its activations)."""
    snap, te = snapshots("modelopt-spec-flash", 0), snapshots("te-spec-flash", 0)
    notes = snap["meta"]["notes"]
    assert any("the norms of ModelOpt's model spec are Megatron's torch norm" in n
               for n in notes), notes
    classes = {m["class"] for m in snap["modules"] if m["fqn"].endswith("core_attention")}
    assert classes == {"FlashDotProductAttention"}
    norms = {m["class"] for m in snap["modules"]
             if m["fqn"].endswith(("input_layernorm", "pre_mlp_layernorm"))}
    assert norms == {"LayerNorm"}
    assert M.model_state_bytes(snap) == M.model_state_bytes(te)
    assert ("te_cublas_workspace", 32 * 2**20 + 1024, False) not in M.workspaces(snap)


@pytest.mark.parametrize("setting,attention", [("te-spec-unfused", "UnfusedDotProductAttention"),
                                               ("te-spec-local", "DotProductAttention"),
                                               ("te-spec-fused", "FlashDotProductAttention")])
def test_attention_backend_is_noted_and_runs_its_attention(snapshots, setting, attention):
    snap = snapshots(setting, 0)
    backend = SETTINGS[setting][0][-1]
    assert any(n.startswith(f"attention backend {backend}:") for n in snap["meta"]["notes"])
    classes = {m["class"] for m in snap["modules"] if m["fqn"].endswith("core_attention")}
    assert classes == {attention}


@pytest.mark.parametrize("setting,kept", [("te-spec-unfused", 0), ("te-spec-local", 1)])
def test_only_megatrons_local_attention_keeps_a_scores_buffer(snapshots, setting, kept):
    """The s x s scores' input buffer (b x heads per TP rank x s x s, bf16): TE's unfused
    backend allocates it per call and frees it as its baddbmm returns; Megatron's local attention
    takes it from its global memory buffer, held to the end of the run (one per shape)."""
    snap = snapshots(setting, 0)
    buffer = GPT.micro_batch * GPT.heads // TP * GPT.seq * GPT.seq * 2
    empty, modules = snap["ops"].index("empty"), snap["modules"]
    empties = [r["free_seq"] for r in M._rows(snap) if r["op"] == empty
               and r["requested_bytes"] == buffer
               and modules[r["module"]]["fqn"].endswith("core_attention")]
    assert empties and sum(free < 0 for free in empties) == kept
    if not kept:  # TE's is dropped as its baddbmm returns, before the softmax allocates
        softmax = [r["alloc_seq"] for r in M._rows(snap)
                   if r["module"] is not None and r["module"] >= 0
                   and modules[r["module"]]["fqn"].endswith("scale_mask_softmax")]
        scores = sorted(r["alloc_seq"] for r in M._rows(snap)
                        if r["op"] == snap["ops"].index("baddbmm"))
        assert len(scores) == len(empties)
        for made, freed in zip(scores, sorted(empties)):
            assert made < freed < min(seq for seq in softmax if seq > made)


@pytest.mark.parametrize("setting", MLA)
def test_multi_latent_attention_holds_what_tes_attention_holds(snapshots, setting):
    """Core attention's activations per layer and micro-batch (b 2, s 128, 4 heads per TP
    rank; q and k heads 48 wide, v heads 32). Fused (TE's cuDNN backend, which takes values
    narrower than keys; the stand-in runs PyTorch's memory-efficient kernel, which does too):
    TE's bshd copies of q, k and v, the output, the fp32 log-sum-exp per head and query, and
    the dropout's 16-byte RNG seed and offset. Unfused: Korthikanti's 5as^2b (softmax output,
    dropout mask and output) and the context, 2sb x 4 x 32, made contiguous for the output
    projection, which saves it."""
    b, s, heads = GPT.micro_batch, GPT.seq, GPT.heads // TP
    expected = {"te-spec-mla": b * s * heads * (48 + 48 + 32 + 32) * 2 + b * heads * s * 4 + 16,
                "te-spec-mla-unfused": 5 * heads * s * s * b + 2 * s * b * heads * 32}[setting]
    snap = snapshots(setting, 0)
    microbatches = M.in_flight_microbatches(PP, 0, microbatches=PP)
    core = M.layer_activation_bytes(snap, LAYER + ".self_attention.core_attention")
    assert core / microbatches == expected
    assert {m["class"] for m in snap["modules"] if m["fqn"].endswith("core_attention")} == \
        {"te-spec-mla": {"FlashDotProductAttention"},
         "te-spec-mla-unfused": {"UnfusedDotProductAttention"}}[setting]


def test_plugin_is_undone_after_the_trace():
    """In one process: trace a megatron.core import, then check that Megatron is as before."""
    code = """
from memlens.devices import get_device
from memlens.targets.session import prepare_process; prepare_process(get_device("h100-80gb"))
import torch, sys
from memlens.engine.tracer import Tracer
from megatron.core.tensor_parallel import random as r
from megatron.core.optimizer import optimizer as o
before = (r._set_cuda_rng_state, r.CudaRNGStatesTracker.fork, o.MixedPrecisionOptimizer.step)
with Tracer("h100-80gb") as t:
    import megatron.core.pipeline_parallel.schedules as s
    during = (r._set_cuda_rng_state, s.forward_backward_no_pipelining)
after = (r._set_cuda_rng_state, r.CudaRNGStatesTracker.fork, o.MixedPrecisionOptimizer.step)
print("SAME", before == after, "PATCHED", during[0] is not before[0],
      "SCHEDULE", s.forward_backward_no_pipelining is not during[1])
"""
    out = _python(code)
    assert "SAME True PATCHED True SCHEDULE True" in out, out


def _python(code: str) -> str:
    import os
    import subprocess

    from support.paths import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_berts_transformer_engine_spec_is_the_local_one_holding_what_te_holds():
    """Without TE, Megatron raises ImportError building BERT's TE spec, which Megatron-LM's
    examples/bert/pretrain_bert.py does on import; in a trace it is a copy of the local spec
    with attention and GEMMs as TE holds them (the local spec itself is left as it was)."""
    code = """
from memlens.devices import get_device
from memlens.targets.session import prepare_process; prepare_process(get_device("h100-80gb"))
from memlens.engine.tracer import Tracer
with Tracer("h100-80gb") as t:
    from megatron.core.models.bert import bert_layer_specs as b
    te = b.get_bert_layer_with_transformer_engine_spec().submodules
    attention = te.self_attention.submodules
    mlp = te.mlp.keywords["submodules"] if hasattr(te.mlp, "keywords") else te.mlp.submodules
    fc1 = mlp.linear_fc1  # 0.19 builds the MLP with functools.partial
    local = b.bert_layer_local_spec.submodules.self_attention.submodules.core_attention
    from megatron.core.models.bert import bert_model
    print("ATTENTION", attention.core_attention.__name__, "LOCAL", local.__name__,
          "TE_GEMMS", getattr(attention.linear_qkv, "memlens_te_gemm", False),
          getattr(fc1, "memlens_te_gemm", False), "NOTED", any("Transformer Engine is not "
          "installed" in n for n in t.notes),
          "B11S", bert_model.is_te_min_version("1.10.0"))
"""
    out = _python(code)
    # B11S: BertModel asks TE's version to shape its padding mask, [b, 1, 1, s] from TE 1.10
    assert ("ATTENTION FlashDotProductAttention LOCAL DotProductAttention TE_GEMMS True True "
            "NOTED True B11S True") in out, out


def test_tes_full_padding_mask_is_made_per_layer_and_kept_by_the_masked_fill():
    """TE's unfused attention with a padding mask ([b, 1, 1, s], True where padded): its
    `get_full_mask` masks a query row or a key column of padding, and the masked_fill that
    zeroes the padded rows after the softmax keeps that [b, 1, s, s] mask for its backward."""
    from memlens.plugins.megatron.attention import _pad_rows_zeroed, te_full_padding_mask

    lengths = [5, 8, 3]
    padded = torch.tensor([[i >= n for i in range(8)] for n in lengths])
    full = te_full_padding_mask(padded.view(3, 1, 1, 8), 8, 8)
    assert full.shape == (3, 1, 8, 8) and full.dtype == torch.bool
    for b, n in enumerate(lengths):
        rows, cols = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
        assert torch.equal(full[b, 0], (rows >= n) | (cols >= n)), b

    class Softmax(torch.nn.Module):
        def forward(self, x):
            return x.softmax(-1)

    scores = torch.randn(3, 2, 8, 8, requires_grad=True)
    with _pad_rows_zeroed(Softmax, full):
        probs = Softmax()(scores)
    assert probs.grad_fn.name() == "MaskedFillBackward0"
    assert torch.equal(probs.grad_fn._saved_mask, full)
    assert (probs[2, :, 3:] == 0).all() and (probs[0, :, :5, :5] > 0).all()
    assert Softmax()(scores).grad_fn.name() == "SoftmaxBackward0"  # undone after the call


def test_megatron_fsdp_on_a_second_tensor_parallel_rank_shards_adam(tmp_path):
    """Megatron-FSDP, ZeRO-3 (optim_grads_params), TP 2 x DP 2, traced for rank 1 (not its
    TP group's first). Its set-up reads values other ranks send (the TP group's RNG states,
    the DP shards' chunk metadata it asserts on), which stopped the trace; now it runs, and
    Adam's two fp32 moments are sharded over DP: 8 N / 2 bytes for the rank's
    N = 1,878,016 parameters, plus Megatron-FSDP's bucket padding (0.14 %)."""
    snap = M.trace(tmp_path, 4, 1, "--tp", "2", "--megatron-fsdp")
    n, dp = GPT.stage_params(2, 1, 0), 2
    adam = M.model_state_bytes(snap)["optimizer_state"]
    assert adam == pytest.approx(8 * n / dp, rel=0.002) and adam >= 8 * n / dp


def test_a_learnable_softmax_offset_gets_its_gradient_from_the_fused_attention(snapshots):
    """`softmax_type="learnable"` (Megatron-LM's `--softmax-type learnable`, the gpt-oss example):
    one bf16 offset per head and layer (8 heads / TP 2 = 4 here), which TE's fused attention
    takes and gives a gradient in backward. Without one, Megatron's DDP with its overlapped
    reduction stops the second step (the parameter's gradient hook never ran). The stand-in
    gives it: the trace runs its two steps, holding what the plain fused attention holds
    per layer, with an 8-byte gradient per layer in each backward."""
    sinks, plain = snapshots("te-spec-sinks", 0), snapshots("te-spec-flash", 0)
    assert [p["name"] for p in sinks["phases"]][-1] == "optimizer_step_iter_1"
    assert M.layer_activation_bytes(sinks, LAYER) == M.layer_activation_bytes(plain, LAYER)
    a = sinks["allocations"]
    offsets = [i for i in range(len(a["bytes"])) if sinks["ops"][a["op"][i]] == "new_zeros"
               and a["requested_bytes"][i] == 4 * 2 and a["backward"][i]
               and M.CATEGORIES[a["category"][i]] == "gradient"]
    # one per layer of the stage, micro-batch (the pipeline's depth) and step
    assert len(offsets) == GPT.layers // PP * PP * 2
