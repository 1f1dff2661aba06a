"""A small MoE GPT with megatron.core (TP 1, EP 2, 4 experts, top-2, the alltoall dispatcher;
2 ranks), traced for both ranks: each holds the experts its EP coordinate gives it, 2 of 4,
whole; routing is drop-and-pad at capacity 1.0 (uniform load) and the snapshot says so."""

from __future__ import annotations


import pytest

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


def test_routing_is_uniform_and_noted(ranks):
    for snap in ranks:
        mods = _modules(snap)
        acts = {mods[f]["activation_bytes"] for f in mods
                if ".local_experts." in f and f.count(".") == 8}
        assert len(acts) == 1 and acts.pop() > 0  # every expert saw the same tokens
        notes = snap["meta"].get("notes", [])
        assert any("capacity factor 1.0" in n and "uniform" in n for n in notes), notes
        assert f"ep {snap['meta']['rank']}/2" in snap["meta"]["parallel"]["role"]


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
