"""Context parallelism as Transformer Engine's p2p ring attention holds memory (the default
`cp_comm_type` "p2p"), for the TE-attention stand-in (attention.py).

Each rank holds its chunk of the sequence, s/CP tokens (with causal masks, chunks i and
2CP-1-i of 2CP, for balanced work: Megatron's `get_batch_on_this_cp_rank`). Keys and values go
round the ring in CP steps; at each step a rank attends its queries to the chunk it holds while
it receives the next one into a second buffer, so two K/V buffers are alive. With a causal
mask, step 0 is the causal diagonal, steps up to the rank attend all local queries to the
first half of the received chunk, later steps the second half of the queries to the whole
chunk. Every step's output and fp32 log-sum-exp are kept until the end, where they are merged
into the output. Backward keeps what TE's keeps: q, the stacked K/V, the output and the merged
log-sum-exp, the same bytes as attention without CP over s/CP tokens; it sends K/V round again
(two buffers) and the K/V gradient back (two more).

Follows Transformer Engine 2.10's `AttnFuncWithCPAndKVP2P`
(`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`), flash
backend, bf16: forward's ring buffers are `torch.cat` of k and v and `empty_like` of it, and it
saves the last one received (the same bytes as the first, which the stand-in saves); backward
allocates `empty_like(q)` for dq and two `(2, *kv.shape)` buffers. Not modelled: the fp32
products of the per-step output corrections (temporaries inside TE's jit-fused kernels), the
few bytes of each step's RNG state and cu_seqlens.

Hierarchical context parallelism (`cp_comm_type` "a2a+p2p", CP = A x P): q, k and v first go
through an all-to-all over the inner A ranks (context_parallel_a2a.py), the ring runs over the
outer P ranks on A x s/CP tokens of h/A heads, and the output goes back through the
all-to-all. TE saves q and the last K/V buffer after the all-to-all (the same bytes) and the
returned output; its backward sends the output and its gradient through the all-to-all again,
and dq, dk, dv back.
"""

from __future__ import annotations

import functools


@functools.cache
def ring_attention_function():
    import torch

    from .context_parallel_a2a import a2a_after_attention, a2a_before_attention, bshd

    flash = torch.ops.aten._scaled_dot_product_flash_attention.default

    class RingAttention(torch.autograd.Function):
        """q, k, v: [b, heads, s/CP, dim] (TE's bshd copies); returns the output, like q.
        `a2a`: (the inner group, its size A) of hierarchical CP, or None; `cp_size` and
        `cp_rank` are then the ring's (outer) ones."""

        @staticmethod
        def forward(ctx, q, k, v, cp_size, cp_rank, causal, dropout, scale, a2a=None):
            ctx.a2a = a2a
            if a2a is not None:
                q, k, v = (bshd(x) for x in a2a_before_attention(
                    [bshd(q), bshd(k), bshd(v)], *a2a))
            kv = torch.stack((k, v))  # TE's first ring buffer: a copy, kept for backward
            half = q.shape[2] // 2
            outs, current = [], kv
            for step in range(cp_size):
                received = torch.empty_like(kv) if step + 1 < cp_size else None
                qq, kk, vv = q, current[0], current[1]
                if causal and step > 0:
                    if step <= cp_rank:  # chunks before the rank's first: their first half
                        kk, vv = kk[:, :, :half], vv[:, :, :half]
                    else:  # only the rank's second chunk comes after them
                        qq = q[:, :, half:]
                outs.append(flash(qq, kk, vv, dropout, causal and step == 0, scale=scale)[:2])
                current = received
            out = torch.empty_like(q)  # the per-step outputs merged by their log-sum-exps
            lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
            del outs
            if a2a is not None:
                out = bshd(a2a_after_attention([bshd(out)], *a2a)[0])
            ctx.save_for_backward(q, kv, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            q, kv, out, lse = ctx.saved_tensors
            if ctx.a2a is not None:  # the output and its gradient, as attention held them
                out, grad_out = a2a_before_attention([bshd(out), bshd(grad_out)], *ctx.a2a)
            ring = [torch.empty_like(kv) for _ in range(2)]  # K/V round the ring again
            dkv_ring = [torch.empty_like(kv) for _ in range(2)]  # their gradients sent back
            dq, dkv = torch.empty_like(q), torch.empty_like(kv)
            del ring, dkv_ring
            dk, dv = dkv[0], dkv[1]
            if ctx.a2a is not None:
                dq, dk, dv = (bshd(x) for x in a2a_after_attention(
                    [bshd(dq), bshd(dk), bshd(dv)], *ctx.a2a))
            return dq, dk, dv, None, None, None, None, None, None

    return RingAttention
