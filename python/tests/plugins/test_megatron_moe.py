"""A small MoE GPT with megatron.core (TP 1, EP 2, 4 experts, top-2, the alltoall dispatcher;
2 ranks), traced for both ranks: each holds the experts its EP coordinate gives it, 2 of 4,
whole. The router runs as configured (every load-balancing type, both dispatchers, no
capacity), and the tokens per expert follow memlens' routing policy (MEMLENS_MOE_ROUTING).

Tokens per expert: each rank routes T = s x b = 128 x 2 = 256 tokens to k = 2 experts.
- balanced: 256 x 2 / 4 = 128 per expert from each of the 2 EP ranks: 256 per local expert;
- worst: every token of both ranks to the traced rank's 2 experts: 2 x 256 = 512 each.
An expert (GeLU MLP h -> FFN = 2h -> h, the routing probability applied after the GeLU) keeps
per token 3 x FFN bf16 values: GeLU's input (fc1 output plus bias), GeLU's output (kept by the
product with the probability) and that product (fc2's input): 3 x 512 x 2 B = 3,072 B, so
256 tokens: 786,432 B; 512 tokens: 1,572,864 B."""

from __future__ import annotations

import pytest

from memlens.plugins.megatron import routing as megatron_routing
from memlens.plugins.megatron import grouped_linear
from memlens.plugins.megatron.grouped_linear import NOTE as GROUPED_NOTE
from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

EXPERTS, EP, TOPK, LAYERS = 4, 2, 2, 2
GPT = M.Gpt(layers=LAYERS)
FFN = 2 * GPT.hidden  # the script's moe_ffn_hidden_size
FLAGS = ("--ep", str(EP), "--moe-experts", str(EXPERTS), "--moe-topk", str(TOPK),
         "--layers", str(LAYERS))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moe")
    return [M.trace(tmp, EP, rank, *FLAGS) for rank in range(EP)]


def _modules(snap: dict) -> dict[str, dict]:
    return {m["fqn"]: m for m in snap["modules"]}


def expert_bytes() -> int:
    """One expert: a GeLU MLP h -> FFN -> h with biases, bf16."""
    h = GPT.hidden
    return 2 * (FFN * h + FFN + h * FFN + h)


@pytest.mark.parametrize("rank", range(EP))
def test_each_rank_holds_its_share_of_the_experts(ranks, rank):
    mods = _modules(ranks[rank])
    for layer in range(LAYERS):
        experts = f"module.module.decoder.layers.{layer}.mlp.experts.local_experts"
        local = [f for f in mods if f.startswith(experts + ".") and f.count(".") ==
                 experts.count(".") + 1]
        assert len(local) == EXPERTS // EP
        for fqn in local:
            assert mods[fqn]["parameter_bytes"] == expert_bytes()
        assert mods[experts]["parameter_bytes"] == EXPERTS // EP * expert_bytes()


def test_model_states_count_the_local_experts_only(ranks):
    """Both ranks hold the same bytes (replicated dense layers, half the experts each), and
    the model states are Megatron's 18 bytes per parameter held (plain optimizer)."""
    totals = []
    for snap in ranks:
        got = M.model_state_bytes(snap)
        params = got["parameter"] // 2  # bf16
        assert sum(got.values()) == M.megatron_model_state_bytes(params, EP, False)
        experts = sum(m["parameter_bytes"] for m in snap["modules"]
                      if m["fqn"].endswith(".mlp.experts"))
        assert experts == LAYERS * EXPERTS // EP * expert_bytes()
        totals.append(got)
    assert totals[0] == totals[1]


TOKENS = GPT.seq * GPT.micro_batch  # one rank's tokens
EXPERT_BYTES_PER_TOKEN = 3 * FFN * 2


def _expert_activations(snap: dict) -> list[int]:
    mods = _modules(snap)
    return [mods[f]["activation_bytes"] for f in mods
            if ".local_experts." in f and f.count(".") == 8]


def test_balanced_routing_by_default_and_noted(ranks):
    per_expert = TOKENS * TOPK // EXPERTS * EP  # 256
    for snap in ranks:
        assert _expert_activations(snap) == [per_expert * EXPERT_BYTES_PER_TOKEN] * 4  # 786,432
        notes = snap["meta"].get("notes", [])
        assert any(n.startswith("MoE routing balanced (MEMLENS_MOE_ROUTING)") for n in notes)
        assert not any("capacity factor" in n for n in notes), notes  # the config is the user's
        assert f"ep {snap['meta']['rank']}/2" in snap["meta"]["parallel"]["role"]


def test_the_router_gemms_take_te_workspace_as_with_te_installed(ranks):
    """The layer spec is Megatron's local one, but where Transformer Engine is installed (a
    GPU machine with Megatron's container) the router's GEMMs run through TE's general_gemm:
    TE's cuBLAS workspace is taken once, at the first router GEMM (32 MiB + 1 KiB on the
    default H100), beside PyTorch's two (the layers' GEMMs: forward, then autograd's thread).
    Megatron's CI shows it: its local-spec MoE configurations hold 32 MiB + 1 KiB more on
    H100s than the 4 MiB of A100s."""
    for snap in ranks:
        assert M.workspaces(snap) == M.TORCH_AND_TE_WORKSPACES
        assert any(n.startswith("Transformer Engine is not installed here: the MoE router's")
                   for n in snap["meta"]["notes"])


GROUPED = ("--spec", "te", "--grouped-gemm")


@pytest.mark.parametrize("recompute", [(), ("--recompute", "selective",
                                            "--recompute-modules", "moe_act")])
def test_te_grouped_experts_run_on_the_grouped_linear_stand_in(ranks, tmp_path, recompute):
    """The TE spec with grouped GEMM where TE is absent: Megatron's TEGroupedMLP on the stand-in
    for TE's GroupedLinear. Its two layers hold both local experts' weights and biases
    (weight0, weight1, bias0, bias1: the SequentialMLP experts' bytes). Of what the experts
    allocate in forward, what is still alive when backward starts is the same 3 x FFN bf16
    values per token as the sequential experts keep (fc1's output, GeLU's output, the product
    fc2 takes) for its 2 x 256 tokens: 3 tensors of 524,288 B. Recomputing `moe_act` keeps only
    fc1's output: the checkpoint discards its output once fc2 has it. The four grouped-GEMM
    workspaces of TE's size are kept from the first layer on."""
    snap = M.trace(tmp_path, EP, 0, *FLAGS, *GROUPED, *recompute)
    mods = _modules(snap)
    tokens = TOKENS * TOPK // EXPERTS * EP * (EXPERTS // EP)  # 512 on this rank's experts
    for layer in range(LAYERS):
        experts = f"module.module.decoder.layers.{layer}.mlp.experts"
        assert mods[experts]["parameter_bytes"] == EXPERTS // EP * expert_bytes()
        assert [mods[f"{experts}.{n}"]["parameter_bytes"] for n in ("linear_fc1", "linear_fc2")] \
            == [EXPERTS // EP * 2 * (FFN * GPT.hidden + FFN),
                EXPERTS // EP * 2 * (GPT.hidden * FFN + GPT.hidden)]
        assert M.kept_into_backward(snap, experts) == \
            [FFN * 2 * tokens] * (1 if recompute else 3)
    a = snap["allocations"]
    workspaces = [a["bytes"][i] for i, op in enumerate(a["op"])
                  if snap["ops"][op] == "te_grouped_gemm_workspace"]
    assert workspaces == [32 * 2**20 + 1024] * 4
    assert GROUPED_NOTE in snap["meta"]["notes"]


# FP8 grouped experts (TE spec, --grouped-gemm, --fp8-format hybrid), H100: what the two
# layers of each MoE layer keep from forward to backward, derived by hand (plugins/megatron/
# grouped_fp8.py). fc1 and fc2 run per local expert on its m = 256 tokens; GeLU keeps fc1's
# output and its own ([512 tokens, FFN] bf16: 524,288 B each); the product fc2 takes is not
# kept, fc2 keeps it quantized. Float8 (tensorwise, delayed) quantizes each expert apart and
# keeps the column-wise copy, a transpose on H100: fc1 [h, m] = 65,536 B, fc2 [FFN, m] =
# 131,072 B, each with a 4 B scale-inverse. Blockwise puts all experts' column-wise data in one
# buffer per layer, data 256-byte and then its 1 x 128 block scales 16-byte aligned:
# fc1 2 x 65,536 + 2 x [m/128, h] x 4 B = 135,168 B; fc2 2 x 131,072 + 2 x [2, FFN] x 4 B =
# 270,336 B. With `moe_act` recomputed, fc2 saves its bf16 input, which the checkpoint
# discards: only fc1's keep and its output remain.
M_TOKENS = TOKENS * TOPK // EXPERTS * EP  # 256 per local expert
GELU = [FFN * 2 * 2 * M_TOKENS] * 2  # fc1's output and GeLU's, both experts'
FLOAT8_SAVED = [4] * 4 + [GPT.hidden * M_TOKENS] * 2 + [FFN * M_TOKENS] * 2
FP8_GROUPED = {
    "tensorwise": ((), sorted(FLOAT8_SAVED + GELU)),
    "blockwise": ((), sorted([2 * GPT.hidden * M_TOKENS + 2 * 2 * GPT.hidden * 4,
                              2 * FFN * M_TOKENS + 2 * 2 * FFN * 4] + GELU)),
    "tensorwise-moe_act": (("--recompute", "selective", "--recompute-modules", "moe_act"),
                           sorted([4] * 2 + [GPT.hidden * M_TOKENS] * 2 + GELU[:1])),
}


@pytest.mark.parametrize("setting", FP8_GROUPED)
def test_fp8_grouped_experts_keep_te_quantized_inputs(tmp_path, setting):
    """The FP8 grouped GEMM's quantized inputs, and TE's weight workspaces: each expert's
    weight row- and column-wise (Float8: data and transpose, 131,072 B each, and a 4 B
    scale-inverse; blockwise: the same data and 64 B + 32 B of 128 x 128 block scales),
    parameters of the "fp8" subcategory kept from the first forward."""
    extra, kept = FP8_GROUPED[setting]
    recipe = setting.split("-")[0]
    snap = M.trace(tmp_path, EP, 0, *FLAGS, *GROUPED, "--fp8-format", "hybrid",
                   "--fp8-recipe", recipe, *extra)
    copies = [GPT.hidden * FFN] * 2 + ([4] if recipe == "tensorwise" else [64, 32])
    for layer in range(LAYERS):
        experts = f"module.module.decoder.layers.{layer}.mlp.experts"
        assert sorted(M.kept_into_backward(snap, experts)) == kept
        for linear in ("linear_fc1", "linear_fc2"):
            assert sorted(_fp8_state(snap, f"{experts}.{linear}")) == \
                sorted(copies * (EXPERTS // EP))
    assert GROUPED_NOTE in snap["meta"]["notes"]


def test_fp8_expert_parameters_hold_only_their_transposes_beside_them(tmp_path):
    """--fp8-param-gather with TE's grouped experts (the gpt-oss example): each expert's
    weights are FP8 parameters, one byte per value in DDP's buffer, which are their own
    row-wise data; TE's workspace per expert is then the transpose (H100) and its 4 B
    scale-inverse only, where bf16 weights take the row-wise copy too (the test above). What
    the experts keep for backward is the same."""
    snap = M.trace(tmp_path, EP, 0, *FLAGS, *GROUPED, "--fp8-format", "hybrid",
                   "--fp8-recipe", "tensorwise", "--fp8-param")
    for layer in range(LAYERS):
        experts = f"module.module.decoder.layers.{layer}.mlp.experts"
        assert sorted(M.kept_into_backward(snap, experts)) == FP8_GROUPED["tensorwise"][1]
        for linear in ("linear_fc1", "linear_fc2"):
            assert sorted(_fp8_state(snap, f"{experts}.{linear}")) == \
                sorted([GPT.hidden * FFN, 4] * (EXPERTS // EP))
    assert any(n.startswith("--fp8-param-gather") for n in snap["meta"]["notes"])


def test_fp8_grouped_experts_pad_tokens_and_keep_delayed_scaling_state(tmp_path):
    """s = 100: each local expert gets 200 tokens, which TE's Fp8Padding pads to 208 (a
    multiple of 16): the saved transposes are [h, 208] and [FFN, 208], the GeLU tensors
    [416, FFN] bf16, and Megatron's padded probabilities [416] bf16 are kept too. Delayed
    scaling's state per grouped layer: 2 experts x 3 forward and 2 backward quantizers, each
    an fp32 scale and 16 rows of amax history: 24 + 384 + 16 + 256 B."""
    snap = M.trace(tmp_path, EP, 0, *FLAGS, *GROUPED, "--fp8-format", "hybrid",
                   "--fp8-recipe", "delayed", "--fp8-amax-history-len", "16", "--seq", "100")
    padded = 208
    kept = [4] * 4 + [GPT.hidden * padded] * 2 + [FFN * padded] * 2 + \
        [2 * padded * FFN * 2] * 2 + [2 * padded * 2]
    state = [24, 384, 16, 256]
    # TransformerConfig asks TE >= 1.7 for MoE FP8 and >= 1.11 for FP8 grouped GEMMs: answered
    # as TE 2.10 (0.16 would compare None and raise TypeError).
    assert any("checks of its version are answered as TE 2.10.0" in n
               for n in snap["meta"]["notes"])
    for layer in range(LAYERS):
        experts = f"module.module.decoder.layers.{layer}.mlp.experts"
        assert sorted(M.kept_into_backward(snap, experts)) == sorted(kept)
        for linear in ("linear_fc1", "linear_fc2"):
            assert sorted(_fp8_state(snap, f"{experts}.{linear}")) == \
                sorted([GPT.hidden * FFN] * 4 + [4] * 2 + state)


def _fp8_state(snap: dict, fqn: str) -> list[int]:
    """Requested bytes of `fqn`'s FP8 weight copies and scaling state (parameters it made in
    its first forward, not its bf16 weights and biases), alive at the end."""
    fqns = [m["fqn"] for m in snap["modules"]]
    first_step = M._phase(snap, "forward_backward_iter_0")["start_seq"]
    return [r["requested_bytes"] for r in M._rows(snap)
            if r["module"] >= 0 and fqns[r["module"]] == fqn and r["free_seq"] < 0
            and r["alloc_seq"] >= first_step and M.CATEGORIES[r["category"]] == "parameter"]


def test_worst_case_routing_sends_every_token_to_this_ranks_experts(ranks, tmp_path):
    """Both local experts (k = 2 of them) process all 512 tokens of the EP group: twice the
    balanced activations (1,572,864 B each); the model states do not change."""
    snap = M.trace(tmp_path, EP, 1, *FLAGS, env={"MEMLENS_MOE_ROUTING": "worst"})
    assert _expert_activations(snap) == [EP * TOKENS * EXPERT_BYTES_PER_TOKEN] * 4
    assert M.model_state_bytes(snap) == M.model_state_bytes(ranks[1])
    assert any(n.startswith("MoE routing worst") for n in snap["meta"]["notes"])


def test_worst_case_top1_loads_one_expert(tmp_path):
    """Top-1, worst case: every token of both ranks to expert 0 (rank 0's first): 2 x 256 =
    512 tokens, 1,572,864 B of activations in each layer's expert 0, none in expert 1. The
    alltoall dispatcher sorts the received chunks (256, 0 from each rank) by expert with
    host-side orders: no value of it is a placeholder."""
    flags = ("--ep", str(EP), "--moe-experts", str(EXPERTS), "--moe-topk", "1", "--layers",
             str(LAYERS))
    snap = M.trace(tmp_path, EP, 0, *flags, env={"MEMLENS_MOE_ROUTING": "worst"})
    assert _expert_activations(snap) == [EP * TOKENS * EXPERT_BYTES_PER_TOKEN, 0] * LAYERS
    assert not [p for p in snap["summary"].get("placeholders", [])
                if "token_dispatcher" in p["file"] or "moe_utils" in p["file"]]


@pytest.mark.parametrize("flags", [("--moe-router-load-balancing-type", "sinkhorn"),
                                   ("--moe-router-load-balancing-type", "seq_aux_loss"),
                                   ("--moe-router-load-balancing-type", "none"),
                                   ("--moe-dispatcher", "allgather")])
def test_every_router_and_dispatcher_traces_with_the_policys_tokens(ranks, tmp_path, flags):
    """The same 256 tokens per local expert (786,432 B of activations each) and model states
    whatever the router balances by or the dispatcher moves tokens with (the allgather
    dispatcher gathers all 512 tokens and keeps its experts' share)."""
    snap = M.trace(tmp_path, EP, 0, *FLAGS, *flags)
    assert _expert_activations(snap) == [TOKENS * TOPK // EXPERTS * EP *
                                         EXPERT_BYTES_PER_TOKEN] * 4
    assert M.model_state_bytes(snap) == M.model_state_bytes(ranks[0])


ROUTER_FUSION = ("--moe-score-function", "sigmoid", "--moe-expert-bias", "--moe-router-fusion")


def test_router_fusion_runs_te_kernels_stand_ins(tmp_path):
    """--moe-router-fusion without Transformer Engine: Megatron calls TE's fused top-k and
    auxiliary-loss kernels, which run as memlens' stand-ins holding what TE 2.10's hold. In
    layer 0's router, after its GEMM's logits (T x E bf16, T = 256 tokens, E = 4 experts):
    top-k's probabilities (bf16), routing map (bool) and intermediate (bf16); the auxiliary
    loss's scores, map and intermediate; the loss (a bf16 scalar) and its constant (an fp32
    scalar). Kept for backward: top-k's map and intermediate, the scores' intermediate and
    the loss's constant, as TE's save_for_backward. (Megatron's unfused router keeps the
    sigmoid's fp32 output, top-k's indices and the gathered scores instead.)"""
    snap = M.trace(tmp_path, EP, 0, *FLAGS, *ROUTER_FUSION)
    assert any(n.startswith("Transformer Engine is not installed here: --moe-router-fusion")
               for n in snap["meta"]["notes"])
    rows = list(M._rows(snap))
    backward = min(r["alloc_seq"] for r in rows if r["backward"])
    router = next(i for i, m in enumerate(snap["modules"])
                  if m["fqn"].endswith("decoder.layers.0.mlp.router"))
    made = [r for r in rows if r["module"] == router and r["alloc_seq"] < backward
            and snap["ops"][r["op"]] == "empty"]
    te = TOKENS * EXPERTS
    assert [r["requested_bytes"] for r in made] == [2 * te,  # the GEMM's logits
                                                   2 * te, te, 2 * te,  # top-k
                                                   2 * te, te, 2 * te,  # the scores
                                                   2, 4]  # the loss and its constant
    kept = [r["requested_bytes"] for r in made
            if r["free_seq"] == -1 or r["free_seq"] > backward]
    assert kept == [2 * te,  # the probabilities, which the dispatcher keeps
                    te, 2 * te, 2 * te,
                    2,  # the loss, which Megatron's MoEAuxLossAutoScaler keeps
                    4]


def test_policy_counts():
    count = megatron_routing.tokens_per_expert
    assert count(256, 2, 4, range(0, 2), which="balanced") == [128] * 4
    assert count(10, 2, 4, range(0, 2), which="balanced") == [5, 5, 5, 5]
    assert count(9, 1, 4, range(0, 2), which="balanced") == [3, 2, 2, 2]
    assert count(256, 2, 4, range(2, 4), which="worst") == [0, 0, 256, 256]
    assert count(256, 2, 4, range(3, 4), which="worst") == [256, 0, 0, 256]  # then the next

    class Config:  # a capacity factor of 1.5: ceil(256 x 2 / 4 x 1.5) = 192 per expert
        moe_expert_capacity_factor, moe_pad_expert_input_to_capacity = 1.5, False

    assert count(256, 2, 4, range(0, 2), Config, "worst") == [192, 192, 0, 0]
    Config.moe_pad_expert_input_to_capacity = True
    assert count(256, 2, 4, range(0, 2), Config, "worst") == [192] * 4


def test_unknown_policy_is_an_error(monkeypatch):
    monkeypatch.setenv("MEMLENS_MOE_ROUTING", "random")
    with pytest.raises(ValueError, match="MEMLENS_MOE_ROUTING='random'.*balanced, worst"):
        megatron_routing.policy()


def test_distributed_optimizer_shards_experts_over_expert_data_parallel(tmp_path):
    """4 ranks, EP 2: dense parameters are sharded over DP 4, experts over expert DP 2 (each
    expert lives on 2 ranks): Megatron's 6 + 12/DP bytes, with each kind's own DP. This holds
    only if the experts' `allreduce=False` survives `Float16Module`'s cast, which puts them in
    DDP's expert buffers. The experts' buffer needs no padding at this size: exact; the dense
    one pads each parameter's start to 64 elements, which the shard boundaries can take."""
    snap = M.trace(tmp_path, 4, 0, *FLAGS, "--distributed-optimizer")
    got = M.model_state_bytes(snap)
    params = got["parameter"] // 2
    experts = [m for m in snap["modules"] if m["fqn"].endswith(".mlp.experts")]
    expert_params = sum(m["parameter_bytes"] for m in experts) // 2
    assert expert_params == LAYERS * EXPERTS // EP * expert_bytes() // 2
    assert got["gradient"] == 4 * params
    expert_states = sum(m["optimizer_state_bytes"] for m in experts)
    assert expert_states == 12 * expert_params // 2
    dense_states = got["optimizer_state"] - expert_states
    dense = 12 * (params - expert_params) // 4
    assert dense - 12 * 64 * 8 <= dense_states <= dense


def _expert_weight_gradients(snap: dict) -> dict[str, list[tuple[int, int]]]:
    """(alloc_seq, free_seq) of the weight gradients each grouped layer of the experts makes in
    the second step's backward (one [FFN, h] or [h, FFN] bf16 tensor per local expert)."""
    fqns = [m["fqn"] for m in snap["modules"]]
    phase = M._phase(snap, "forward_backward_iter_1")
    out: dict[str, list[tuple[int, int]]] = {"linear_fc1": [], "linear_fc2": []}
    for r in M._rows(snap):
        fqn = fqns[r["module"]] if r["module"] >= 0 else ""
        layer = fqn.rsplit(".", 1)[-1]
        if layer in out and "GroupedMLP" in fqn and r["backward"] and \
                M.CATEGORIES[r["category"]] == "gradient" and snap["ops"][r["op"]] == "empty" \
                and r["requested_bytes"] == FFN * GPT.hidden * 2 \
                and phase["start_seq"] <= r["alloc_seq"] < phase["end_seq"]:
            out[layer].append((r["alloc_seq"], r["free_seq"]))
    return out


OVERLAP = (*FLAGS, *GROUPED, "--overlap-moe-ep-comm")


def test_deferred_expert_weight_gradients_wait_for_backward_dw(tmp_path):
    """Megatron's combined 1F1B (`--overlap-moe-ep-comm`) with `--delay-wgrad-compute`: TE's
    GroupedLinear (the stand-in) keeps each backward's weight-gradient operands until Megatron
    calls the layer's `backward_dw` after the MLP's backward, and Megatron's DDP reduces the
    gradients from there (the hooks it registers on the module), not from autograd's. Each
    layer's fc2 weight gradients are then still alive when fc1's backward makes its own; without
    the delay they are reduced into the gradient buffer and freed before. What autograd is
    handed stays referenced by TE's store, so AccumulateGrad copies it (one copy per expert
    weight, freed when backward_dw sets the gradient). Nothing is left over after the step."""
    plain = M.trace(tmp_path, EP, 0, *OVERLAP)
    delayed = M.trace(tmp_path, EP, 0, *OVERLAP, "--delay-wgrad-compute")
    for snap, deferred in ((plain, False), (delayed, True)):
        grads = _expert_weight_gradients(snap)
        fc1, fc2 = grads["linear_fc1"], grads["linear_fc2"]
        layers = LAYERS  # one micro-batch: each layer's fc2, then its fc1
        assert len(fc1) == len(fc2) == layers * EXPERTS // EP
        for layer in range(layers):
            mine = slice(layer * EXPERTS // EP, (layer + 1) * EXPERTS // EP)
            fc1_first = min(seq for seq, _ in fc1[mine])
            assert all((free > fc1_first) == deferred for _, free in fc2[mine]), (deferred, grads)
        copies = [r for r in M._rows(snap) if r["backward"] and snap["ops"][r["op"]] ==
                  "new_empty_strided" and r["requested_bytes"] == FFN * GPT.hidden * 2]
        assert len(copies) == (2 * layers * EXPERTS // EP * 2 if deferred else 0)  # 2 steps
    assert delayed["summary"]["final_bytes"] == plain["summary"]["final_bytes"]
    assert delayed["summary"]["peak_bytes"] > plain["summary"]["peak_bytes"]
    assert grouped_linear.DELAYED_NOTE in delayed["meta"]["notes"]
    assert grouped_linear.DELAYED_NOTE not in plain["meta"]["notes"]
