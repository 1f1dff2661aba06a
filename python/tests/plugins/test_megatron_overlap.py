"""Megatron-LM's standard performance flags on megatron.core: gradient accumulation fusion
(the default) with `--overlap-grad-reduce` and, with the distributed optimizer,
`--overlap-param-gather` (2 ranks, DP 2, TP 1, PP 1).

With fusion the weight gradient goes straight into the fp32 `main_grad` and backward hands DDP
a dummy gradient, flagged `grad_added_to_main_grad` on the Parameter; DDP's overlapped hooks
need both. The overlap changes when buckets are reduced, not what is held: bucket_size is
max(40,000,000, 1,000,000 x DP) elements with overlap and one bucket without, and this model's
parameters fit one bucket either way, so the buffers, and with them the model states, are the
same bytes on and off: Megatron's 18 B per parameter, 6 + 12/DP with the distributed optimizer.
Fused, the layers' dummy gradients are Transformer Engine's (Megatron takes TE's where it is
installed, as on a GPU): one bf16 tensor per weight shape, kept for the life of the process.
"""

from __future__ import annotations

import pytest

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

WORLD, DP = 2, 2
GPT = M.Gpt()
PARAMS = GPT.stage_params(1, 1, 0)  # the whole model on each rank: 3,716,608 parameters
FUSED_OVERLAP = ("--grad-accum-fusion", "--overlap-grad-reduce")
MiB = 1 << 20


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("overlap")
    cache: dict = {}

    def get(*flags: str) -> dict:
        if flags not in cache:
            cache[flags] = M.trace(tmp, WORLD, 0, "--steps", "2", *flags)
        return cache[flags]

    return get


def test_fusion_with_overlapped_grad_reduce_keeps_the_model_states(trace):
    """18 B x 3,716,608 = 66,898,944 B, on and off; fused, TE's dummy gradients besides: QKV
    [768, 256], projection [256, 256], FC1 [1024, 256] (the output layer's shape too), FC2
    [256, 1024] in bf16, 1,572,864 B."""
    assert PARAMS == 3_716_608
    off, on = M.model_state_bytes(trace()), M.model_state_bytes(trace(*FUSED_OVERLAP))
    dummies = GPT.te_dummy_wgrad_bytes(1, output_layer=True)
    assert dummies == 1_572_864
    assert on == {**off, "gradient": off["gradient"] + dummies}
    assert on["parameter"] == 2 * PARAMS and on["gradient"] == 4 * PARAMS + dummies
    on["gradient"] -= dummies
    assert sum(on.values()) == M.megatron_model_state_bytes(PARAMS, DP, False) == 66_898_944
    assert any("fused weight-gradient accumulation" in n for n in
               trace(*FUSED_OVERLAP)["meta"]["notes"])


def test_distributed_optimizer_with_overlapped_param_gather(trace):
    """6 B + 12 B / 2 per parameter, on and off. The parameter and gradient buffers pad each
    parameter's start to 64 elements and the bucket's end to lcm(DP, 128) = 128, the same
    padding on and off; the optimizer's fp32 shard is half the (padded) buffer."""
    flags = ("--distributed-optimizer",)
    off = M.model_state_bytes(trace(*flags))
    on = M.model_state_bytes(trace(*flags, *FUSED_OVERLAP, "--overlap-param-gather"))
    on["gradient"] -= GPT.te_dummy_wgrad_bytes(1, output_layer=True)  # as above
    assert on == off
    assert on["parameter"] == 2 * PARAMS and on["gradient"] == 4 * PARAMS
    assert sum(on.values()) == M.megatron_model_state_bytes(PARAMS, DP, True) == 44_599_296


def test_fusion_with_overlap_holds_the_same_activations(trace):
    """The forward saves the same tensors: a layer's activations are Korthikanti's (TP 1)
    within 1 %, fused and overlapped or not."""
    layer = "module.module.decoder.layers.0"
    off = M.layer_activation_bytes(trace(), layer)
    on = M.layer_activation_bytes(trace(*FUSED_OVERLAP), layer)
    assert on == off
    assert on == pytest.approx(GPT.activation_bytes(1, False, "none"), rel=0.01)


def test_overlapped_collectives_run_on_the_data_parallel_groups_nccl_stream(trace):
    """ProcessGroupNCCL 2.13 (kernels/nccl_work.py): start_grad_sync and start_param_sync pass
    async_op = overlap_grad_reduce / overlap_param_gather. Off, every collective is synchronous
    and runs on the current stream: no NCCL stream. On, the coalesced reduce-scatters and
    all-gathers run on the data-parallel group's NCCL stream, their works stashing the grad and
    param buffers until finish_*_sync waits; those buffers are held for the whole step anyway,
    so nothing is allocated on that stream and the peaks do not move for it."""
    off = trace("--distributed-optimizer")
    on = trace("--distributed-optimizer", *FUSED_OVERLAP, "--overlap-param-gather")
    assert off["allocations"]["stream_names"] == {}
    assert on["allocations"]["stream_names"] == {"1": "nccl:DATA_PARALLEL_GROUP_WITH_CP"}
    assert set(on["allocations"]["stream"]) == {0}
    # Fused, TE's dummy gradients besides (each under 1 MiB: one 2 MiB small-pool segment).
    dummies = GPT.te_dummy_wgrad_bytes(1, output_layer=True)
    assert on["summary"]["peak_bytes"] == off["summary"]["peak_bytes"] + dummies
    assert on["summary"]["reserved_peak_bytes"] == \
        off["summary"]["reserved_peak_bytes"] + 2 * 2**20


def test_nccl_user_buffers_hold_ddps_buffers_in_a_pool_of_their_own(trace):
    """`--nccl-ub` (DDP's `nccl_ub`, Megatron-LM's `--use-nccl-ub`): megatron.core makes a
    torch.cuda.MemPool over NCCL's allocator (a C++ extension it builds at first use; not in a
    trace: plugins/megatron/nccl_allocator.py) and makes DDP's buffers inside `use_mem_pool`.
    The bytes are those of the run without it, phase by phase; the pool holds a segment per
    buffer, for itself: the fp32 gradient buffer (PARAMS x 4 B = 14.2 MiB, rounded to 2 MiB:
    16 MiB) and, with the distributed optimizer, the bf16 parameter buffer too (7.1 MiB, below
    10 MiB: a 20 MiB segment)."""
    for flags, pool_bytes in (((), 16 * MiB), (("--distributed-optimizer",), 36 * MiB)):
        off, on = trace(*flags), trace(*flags, "--nccl-ub")
        assert [(p["name"], p["peak_bytes"], p["current_after_bytes"]) for p in on["phases"]] \
            == [(p["name"], p["peak_bytes"], p["current_after_bytes"]) for p in off["phases"]]
        [pool] = on["summary"]["devices"]["cuda:0"]["graph_pools"]
        assert pool["name"].startswith("MemPool (NCCL's ncclMemAlloc) made at ")
        assert (pool["reserved_peak_bytes"], pool["reserved_final_bytes"]) == \
            (pool_bytes, pool_bytes)
        assert "graph_pools" not in off["summary"]["devices"]["cuda:0"]
        assert any(n.startswith("--use-nccl-ub") for n in on["meta"]["notes"])
