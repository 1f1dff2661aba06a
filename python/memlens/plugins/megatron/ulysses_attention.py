"""Context parallelism as Transformer Engine's all-to-all attention holds memory
(`cp_comm_type` "a2a", DeepSpeed-Ulysses style), for the TE-attention stand-in (attention.py).

q, k and v go through an all-to-all over the CP group (context_parallel_a2a.py): each rank
then holds the whole sequence of h/CP heads, attends it at once (no ring), and sends its
output back the other way. As TE 2.10's `AttnFuncWithCPAndQKVOA2A` holds memory (flash
backend, bf16): it saves q, k, v after the all-to-all, the kernel's output before it goes back,
and the fp32 log-sum-exp, the same bytes as attention without CP over s/CP tokens of all heads;
the output it returns is another tensor. Backward sends the output's gradient through the
all-to-all, allocates dq, dk, dv, and sends them back.
"""

from __future__ import annotations

import functools


@functools.cache
def ulysses_attention_function():
    import torch

    from .context_parallel_a2a import a2a_after_attention, a2a_before_attention, bshd

    flash = torch.ops.aten._scaled_dot_product_flash_attention.default

    class UlyssesAttention(torch.autograd.Function):
        """q, k, v: [b, heads, s/CP, dim] (TE's bshd copies); returns the output, like q."""

        @staticmethod
        def forward(ctx, q, k, v, group, cp_size, causal, dropout, scale):
            ctx.a2a = (group, cp_size)
            q, k, v = (bshd(x) for x in a2a_before_attention([bshd(q), bshd(k), bshd(v)],
                                                              group, cp_size))
            out, lse = flash(q, k, v, dropout, causal, scale=scale)[:2]
            ctx.save_for_backward(q, k, v, out, lse)
            return bshd(a2a_after_attention([bshd(out)], group, cp_size)[0])

        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, out, lse = ctx.saved_tensors
            grad_out = a2a_before_attention([bshd(grad_out)], *ctx.a2a)[0]
            dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
            dq, dk, dv = (bshd(x) for x in a2a_after_attention(
                [bshd(dq), bshd(dk), bshd(dv)], *ctx.a2a))
            return dq, dk, dv, None, None, None, None, None

    return UlyssesAttention
