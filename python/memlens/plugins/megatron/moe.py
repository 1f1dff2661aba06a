"""Patches for Megatron's mixture of experts in a trace (the plugin is __init__.py).

The router runs as configured, but how many tokens each expert gets is fixed by memlens'
routing policy (routing.py: balanced by default, `MEMLENS_MOE_ROUTING=worst`): a trace
has no router values, and the dispatchers read those counts back to the host to size their
buffers. The dispatchers are given the policy's counts as the host values they would have read,
and the permutation sizes its outputs by them. Each patch is `patch(plugin, module)`.
"""

from __future__ import annotations

import functools
import inspect
from importlib.util import find_spec
from types import ModuleType

from . import routing


def moe_utils(plugin, mod: ModuleType) -> None:
    """- The router's GEMMs (RouterGatingLinearFunction) run through `te_general_gemm` where
    Transformer Engine is installed, on TE's workspace: where it is absent here (megatron-core
    0.16 does not even define the name, 0.19 sets it None), they run as TE's call
    (te_gemm.general_gemm), as on a GPU machine with Megatron's container.
    - `permute` selects each expert's tokens with masked_select, whose size is the number of
    tokens routed: the dispatchers hand it that number (`num_out_tokens`), which the
    policy's counts make a host value: its outputs have that size. That is up to 0.18;
    0.19's permute cuts an argsort at that number itself (and returns five values), and runs
    as it is.
    - `--moe-router-fusion` calls TE's fused router kernels, which moe_utils sets None where
    TE is absent: they run as memlens' stand-ins (fused_router.py)."""
    if find_spec("transformer_engine") is None:
        from . import fused_router

        fused_router.install(plugin, mod)
    if getattr(mod, "te_general_gemm", None) is None and find_spec("transformer_engine") is None \
            and hasattr(mod, "RouterGatingLinearFunction"):
        from .te_gemm import general_gemm

        gemm = general_gemm(plugin)

        def te_general_gemm(*args, **kwargs):  # said once a router runs: MoE models only
            plugin.note("Transformer Engine is not installed here: the MoE router's GEMMs run "
                        "as Megatron runs them where it is (Megatron's containers), through "
                        "TE's general_gemm on TE's cuBLAS workspace (plugins/megatron/te_gemm.py)")
            return gemm(*args, **kwargs)

        plugin.patcher.setattr(mod, "te_general_gemm", te_general_gemm)
    original = mod.permute
    if "align_size" in inspect.signature(original).parameters:
        # 0.19 selects with an argsort cut at num_out_tokens (a fixed shape, sized by the
        # policy's host value), not masked_select: nothing to stand in for.
        return

    @functools.wraps(original)
    def permute(tokens, routing_map, probs=None, num_out_tokens=None, fused=False,
                drop_and_pad=False):
        if fused or drop_and_pad or not _is_host_value(num_out_tokens):
            return original(tokens, routing_map, probs, num_out_tokens, fused, drop_and_pad)
        return known_permute(tokens, routing_map, probs, int(num_out_tokens))

    plugin.replace(mod, "permute", permute)


def known_permute(tokens, routing_map, probs, routed: int):
    """Megatron's unfused permute with `routed` tokens selected: the same tensors (the
    transposed mask, the token indices, the probabilities and tokens gathered by them)."""
    import torch

    mask = routing_map.bool().T.contiguous()  # [experts, tokens]
    sorted_indices = torch.empty(routed, dtype=torch.long, device=routing_map.device)
    permuted_probs = None if probs is None else select(probs, mask, routed)
    del mask
    return tokens.index_select(0, sorted_indices), permuted_probs, sorted_indices


def select(probs, mask_t, routed: int):
    """`probs.T.contiguous().masked_select(mask_t)` with `routed` elements selected (through
    index_select, whose result and gradient path are masked_select's)."""
    import torch

    flat = probs.T.contiguous().view(-1)
    return flat.index_select(0, torch.empty(routed, dtype=torch.long, device=flat.device))


def token_dispatcher(plugin, mod: ModuleType) -> None:
    which = routing.policy()
    alltoall_preprocess(plugin, mod.MoEAlltoAllTokenDispatcher, which)
    allgather_postprocess(plugin, mod.MoEAllGatherTokenDispatcher, which)


def alltoall_preprocess(plugin, cls, which: str) -> None:
    """The alltoall dispatcher's counts (tokens per local expert, the all-to-all splits, the
    tokens each rank sends each local expert) as the host values it would copy from the
    device: the policy's, every rank of the TP x EP group routing its tokens the same way."""
    init, original = cls.__init__, cls.preprocess

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.config.moe_permute_fusion:
            return
        # The orders that sort the received chunks by local expert and back, which Megatron
        # reads with .tolist(): host tensors (made under the trace's mode they would be fake).
        with _host():
            import torch

            chunks = torch.arange(self.num_experts * self.tp_size)
            self.sort_input_by_local_experts = chunks.reshape(-1, self.num_local_experts).T.ravel()
            self.restore_output_by_local_experts = \
                chunks.reshape(self.num_local_experts, -1).T.ravel()

    plugin.patcher.setattr(cls, "__init__", __init__)

    @functools.wraps(original)
    def preprocess(self, routing_map):
        out = original(self, routing_map)  # its device counts and synchronisation points
        plugin.note(routing.note(which))
        with _host():
            import torch

            if self.drop_and_pad:  # torch.full on the host, made fake by the trace's mode
                return torch.full(tuple(out.shape), self.capacity * self.tp_size * self.ep_size,
                                  dtype=out.dtype)
            lo, hi = self.local_expert_indices[0], self.local_expert_indices[-1] + 1
            sent = torch.tensor(routing.tokens_per_expert(
                routing_map.size(0), self.config.moe_router_topk, self.num_experts,
                range(lo, hi), self.config, which))
            if self.config.moe_expert_capacity_factor is not None:
                self.num_out_tokens = int(sent.sum())
            if self.ep_size > 1 or self.tp_size > 1:
                self.input_splits = sent.reshape(self.ep_size, self.num_local_experts).sum(1) \
                    .numpy()
                # [tp, ep, local experts]: what each rank of the group sends this rank's experts
                received = sent[lo:hi].expand(self.tp_size, self.ep_size, hi - lo)
                per_rank = received.sum(2)
                self.output_splits = per_rank[self.tp_rank].numpy()
                self.output_splits_tp = per_rank.sum(1).numpy()
                tokens = received.sum((0, 1))
            else:
                received, tokens = sent, sent
            if self.num_local_experts > 1:
                self.num_global_tokens_per_local_expert = \
                    received.reshape(-1, self.num_local_experts).contiguous()
            return tokens

    plugin.patcher.setattr(cls, "preprocess", preprocess)


def allgather_postprocess(plugin, cls, which: str) -> None:
    """The allgather dispatcher counts the gathered tokens of this rank's experts on the
    device and reads them back: the policy's counts instead, for every rank's tokens."""
    original = cls.dispatch_postprocess

    @functools.wraps(original)
    def dispatch_postprocess(self, hidden_states, probs):
        plugin.note(routing.note(which))
        self.hidden_shape_before_permute = hidden_states.shape
        lo, hi = self.local_expert_indices[0], self.local_expert_indices[-1] + 1
        self.local_map = self.routing_map[:, lo:hi].contiguous()
        self.local_probs = probs[:, lo:hi].contiguous()
        ranks = self.tp_size * self.ep_size
        with _host():
            import torch

            per_rank = routing.tokens_per_expert(
                self.routing_map.size(0) // ranks, self.config.moe_router_topk,
                self.config.num_moe_experts, range(lo, hi), self.config, which)
            tokens_per_expert = torch.tensor(per_rank[lo:hi]) * ranks
        routed = int(tokens_per_expert.sum())
        permuted, _, self.reversed_local_input_permutation_mapping = known_permute(
            hidden_states, self.local_map, None, routed)
        self.local_probs = select(self.local_probs, self.local_map.T.contiguous(), routed)
        self.routing_map = None
        return permuted, tokens_per_expert, self.local_probs

    plugin.patcher.setattr(cls, "dispatch_postprocess", dispatch_postprocess)


def _is_host_value(n) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(n, int) or (hasattr(n, "dtype") and not isinstance(n, FakeTensor))


def _host():
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


PATCHES = {
    "megatron.core.transformer.moe.moe_utils": moe_utils,
    "megatron.core.transformer.moe.token_dispatcher": token_dispatcher,
}
