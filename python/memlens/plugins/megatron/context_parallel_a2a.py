"""The all-to-all of Transformer Engine's hierarchical context parallelism (`cp_comm_type`
"a2a+p2p", Megatron's `--hierarchical-context-parallel-sizes A P`, and "a2a" alone), for the
ring attention stand-in (ring_attention.py) and the all-to-all one (ulysses_attention.py).

Before attention, each of q, k, v (and in backward the output and its gradient) goes through
an all-to-all over the inner group of A ranks: a rank gives up A-1 of every A heads and gets
the other ranks' sequence chunks of its own heads, so it holds A x s/CP tokens of h/A heads,
the same bytes. The p2p ring then runs over the outer group of P ranks (with "a2a", A = CP and
no ring). After attention, the output (and in backward dq, dk, dv) goes back the other way.

As TE 2.10's `flash_attn_a2a_communicate` allocates (`transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py`), bshd layout, per tensor in turn: a contiguous
copy with the A head groups first, an `empty_like` output of the all-to-all (issued async,
waited for one tensor later), then the sequence chunks reordered into a new tensor (TE's
reorder functions are `torch.compile`d: movedim, contiguous and index_select are one kernel,
one allocation); the copies given to the all-to-all are let go when the call returns. TE
reorders on its CP stream; here every tensor is on the current stream (the bytes allocated are
the same; the caching allocator's per-stream pools are not modelled for it).
"""

from __future__ import annotations


def bshd(x):
    """The attention kernel's [b, heads, s, dim] view of a [b, s, heads, dim] tensor, and back:
    the exchange works on TE's bshd layout."""
    return x.transpose(1, 2)


def a2a_before_attention(tensors: list, group, size: int) -> list:
    """[b, s, h, d] tensors -> [b, size * s, h / size, d] ones (TE's before_attn=True)."""
    import torch

    def send_buffer(x):  # [b, s, h, d] -> [A, b, s, h/A, d]
        return x.view(*x.shape[:-2], size, x.shape[-2] // size, x.shape[-1]) \
            .movedim(-3, 0).contiguous()

    def reordered(x):  # [A, b, s, h/A, d] -> [b, A*s, h/A, d], chunks in sequence order
        return torch.empty((x.shape[1], size * x.shape[2], *x.shape[3:]), dtype=x.dtype,
                           device=x.device)

    return _exchange(tensors, group, send_buffer, reordered)


def a2a_after_attention(tensors: list, group, size: int) -> list:
    """[b, size * s, h / size, d] tensors -> [b, s, h, d] ones (TE's before_attn=False)."""
    import torch

    def send_buffer(x):  # [b, A*s, h/A, d] -> [A, 2, b, s/2, h/A, d], chunks reordered
        b, s, h, d = x.shape
        return torch.empty((size, 2, b, s // (2 * size), h, d), dtype=x.dtype, device=x.device)

    def reordered(x):  # [A, 2, b, s/2, h/A, d] -> [b, s, h, d]
        return x.movedim(0, -3).movedim(0, 1).contiguous() \
            .view(x.shape[2], -1, size * x.shape[-2], x.shape[-1])

    return _exchange(tensors, group, send_buffer, reordered)


def _exchange(tensors: list, group, send_buffer, reordered) -> list:
    """TE's pipelined loop: tensor i's send buffer is made while tensor i-1's all-to-all is in
    flight, and tensor i-2's result is reordered once its all-to-all is waited for."""
    import torch
    import torch.distributed as dist

    sends: list = [None] * len(tensors)
    received: list = [None] * len(tensors)
    works: list = [None] * len(tensors)
    for i in range(len(tensors) + 2):
        if 0 < i < len(tensors) + 1:
            received[i - 1] = torch.empty_like(sends[i - 1])
            works[i - 1] = dist.all_to_all_single(received[i - 1], sends[i - 1], group=group,
                                                  async_op=True)
        if i > 1:
            works[i - 2].wait()
            works[i - 2] = None
            received[i - 2] = reordered(received[i - 2])
        if i < len(tensors):
            sends[i] = send_buffer(tensors[i])
    return received
