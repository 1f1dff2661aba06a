"""Stand-ins for Transformer Engine's fused MoE router kernels (`--moe-router-fusion`), where TE
is not installed: `fused_topk_with_score_function`, `fused_compute_score_for_moe_aux_loss` and
`fused_moe_aux_loss`, which Megatron's moe_utils calls in place of its unfused router.

Each holds what TE 2.10's kernel holds (transformer_engine/pytorch/router.py and
csrc/extensions/router.cpp at v2.10, the version the other stand-ins answer as): the
outputs in new tensors, and for backward the routing map and one intermediate of the logits'
shape and dtype (the score function's output), where the unfused path keeps every step's
tensors (the sigmoid, the biased scores, top-k's values and indices, the scattered map).
A trace has no router values: the outputs' contents are not computed (routing.py fixes the
tokens each expert gets).
"""

from __future__ import annotations

from types import ModuleType

# The fused kernels moe_utils takes from TE besides the router's (no stand-ins: permute fusion
# is turned off with a note, args.py).
OTHER_TE_KERNELS = ("fused_permute", "fused_permute_with_probs", "fused_permute_and_pad_with_probs",
                    "fused_unpermute", "fused_sort_chunks_by_index",
                    "fused_sort_chunks_by_index_with_probs")
SCORE_FUNCTIONS = ("softmax", "sigmoid")  # TE 2.10's; sqrtsoftplus came with TE 2.13


def _check(score_function: str) -> None:
    if score_function not in SCORE_FUNCTIONS:
        raise ValueError(f"score_function must be softmax or sigmoid for router fusion (the "
                         f"Transformer Engine 2.10 kernel memlens stands in for; got "
                         f"{score_function!r})")


def _autograd_functions():
    """The three autograd functions (defined once torch is imported, by the trace)."""
    import torch

    class FusedTopkScoreFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, topk, use_pre_softmax, num_groups, group_topk,
                    scaling_factor, score_function, expert_bias):
            _check(score_function)
            shape = logits.shape
            flat = logits.view(-1, shape[-1])
            probs = torch.empty(flat.shape, dtype=logits.dtype, device=logits.device)
            routing_map = torch.empty(flat.shape, dtype=torch.bool, device=logits.device)
            intermediate = torch.empty(flat.shape, dtype=logits.dtype, device=logits.device)
            ctx.save_for_backward(routing_map, intermediate)
            return probs.view(shape), routing_map

        @staticmethod
        def backward(ctx, grad_probs, _):
            routing_map, intermediate = ctx.saved_tensors
            shape = grad_probs.shape
            flat = grad_probs.contiguous().view(-1, shape[-1])
            grad_logits = torch.empty(flat.shape, dtype=flat.dtype, device=flat.device)
            return (grad_logits.view(shape),) + (None,) * 7

    class FusedComputeScoresForMoEAuxLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, topk, score_function):
            _check(score_function)
            flat = logits.view(-1, logits.shape[-1])
            scores = torch.empty(flat.shape, dtype=logits.dtype, device=logits.device)
            routing_map = torch.empty(flat.shape, dtype=torch.bool, device=logits.device)
            intermediate = torch.empty(flat.shape, dtype=logits.dtype, device=logits.device)
            ctx.save_for_backward(intermediate)
            return routing_map, scores

        @staticmethod
        def backward(ctx, _, grad_scores):
            (intermediate,) = ctx.saved_tensors
            shape = grad_scores.shape
            flat = grad_scores.contiguous().view(-1, shape[-1])  # read by the kernel
            grad_logits = torch.empty(flat.shape, dtype=intermediate.dtype,
                                      device=intermediate.device)
            return grad_logits.view(shape), None, None

    class FusedAuxLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, probs, tokens_per_expert, total_num_tokens, num_experts, topk, coeff):
            aux_loss = torch.empty((), dtype=probs.dtype, device=probs.device)
            const_buf = torch.empty((), dtype=torch.float32, device=probs.device)
            ctx.save_for_backward(const_buf, tokens_per_expert)
            ctx.rows, ctx.cols = probs.size(0), probs.size(1)
            return aux_loss

        @staticmethod
        def backward(ctx, grad_aux_loss):
            grad_probs = torch.empty((ctx.rows, ctx.cols), dtype=grad_aux_loss.dtype,
                                     device=grad_aux_loss.device)
            return grad_probs, None, None, None, None, None

    return FusedTopkScoreFunction, FusedComputeScoresForMoEAuxLoss, FusedAuxLoss


def install(plugin, mod: ModuleType) -> None:
    """Set the three names in Megatron's moe_utils (None or missing where TE is absent) to
    the stand-ins; a call notes them."""
    if not hasattr(mod, "HAVE_TE"):
        return  # a Megatron without router fusion
    topk_fn, scores_fn, aux_fn = _autograd_functions()

    def noted():
        plugin.note("Transformer Engine is not installed here: --moe-router-fusion runs memlens' "
                    "stand-ins for TE's fused router kernels, which hold what TE 2.10's hold "
                    "(the routing map and one intermediate for backward; "
                    "plugins/megatron/fused_router.py)")

    def fused_topk_with_score_function(logits, topk, use_pre_softmax=False, num_groups=None,
                                       group_topk=None, scaling_factor=None,
                                       score_function="softmax", expert_bias=None):
        noted()
        return topk_fn.apply(logits, topk, use_pre_softmax, num_groups, group_topk,
                             scaling_factor, score_function, expert_bias)

    def fused_compute_score_for_moe_aux_loss(logits, topk, score_function):
        noted()
        return scores_fn.apply(logits, topk, score_function)

    def fused_moe_aux_loss(probs, tokens_per_expert, total_num_tokens, num_experts, topk, coeff):
        noted()
        return aux_fn.apply(probs, tokens_per_expert, total_num_tokens, num_experts, topk, coeff)

    # moe_utils checks `not HAVE_TE or <kernel> is None` before each of TE's fused kernels:
    # HAVE_TE is made true, the other kernels' names stay (0.16: are set) None, so that their
    # check still refuses them with Megatron's own message.
    plugin.patcher.setattr(mod, "HAVE_TE", True)
    for name in OTHER_TE_KERNELS:
        if not hasattr(mod, name):
            plugin.patcher.setattr(mod, name, None)
    for function in (fused_topk_with_score_function, fused_compute_score_for_moe_aux_loss,
                     fused_moe_aux_loss):
        if getattr(mod, function.__name__, None) is None:
            plugin.patcher.setattr(mod, function.__name__, function)
