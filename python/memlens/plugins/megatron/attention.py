"""Core attention as Transformer Engine's attention backends hold memory, for configurations
that ask for Transformer Engine where it is not installed.

`attention_backend` (`--attention-backend`) picks TE's backend: flash and fused (cuDNN) keep
no s x s scores, and `auto` picks one of them on every GPU memlens simulates (all sm80 or
newer, which both need); unfused and local keep them, as Megatron's local attention does,
which then runs itself. For `unfused` it runs as TE's UnfusedDotProductAttention allocates:
the scores' input buffer is a tensor of the call, freed as its baddbmm returns, where Megatron's
local attention takes a persistent one from its global memory buffer (an s x s buffer per
micro-batch shape, held for the whole run: 64 MiB at b 4, 8 heads, s 1,024 in bf16).

Megatron's local `DotProductAttention` materialises the s x s scores (softmax output, dropout
mask and output: 5 a s^2 b bytes per layer), which TE's fused attention never does; at long
sequences the difference is most of the activations. This stand-in calls PyTorch's flash
attention kernel on q, k, v copied into the [b, s, heads, dim] layout, as TE's flash backend
copies them, so it saves what TE saves: those copies (q of all heads, k and v of the query
groups only: grouped-query attention needs no repeated keys or values; the QKV projection's
output they came from is freed), the output, and the fp32 softmax log-sum-exp per head and
query.

With a learnable softmax offset (`--softmax-type learnable`: gpt-oss's attention sinks, one
value per head) TE runs its fused (cuDNN) backend, which holds what the flash kernel holds and
gives the offset its gradient in backward (`d_softmax_offset`); the stand-in gives it a
gradient of its shape there too, so DDP's hooks see every parameter's gradient (Megatron's DDP
counts them: a parameter that gets none stops its second step).

With context parallelism (CP > 1) it attends as TE's p2p ring does (ring_attention.py):
each rank its s/CP tokens, K/V exchanged round the ring; with `cp_comm_type` "a2a+p2p" after
an all-to-all within the inner group of the hierarchy (context_parallel_a2a.py), and with
"a2a" as TE's all-to-all attention (ulysses_attention.py).
"""

from __future__ import annotations

import contextlib
import copy
import functools

from ...patches import Patcher
from .kernels import backward_in_place
from .ring_attention import ring_attention_function
from .ulysses_attention import ulysses_attention_function


class _BuffersOfTheCall:
    """Stands in for Megatron's GlobalMemoryBuffer during one call: each tensor asked for is a
    new one (TE's `torch.empty(..., device=current_device())`), freed as soon as the baddbmm
    that takes it returns: TE rebinds its name to the result, where Megatron's local attention
    keeps its buffer in a local until the call ends."""

    def __init__(self) -> None:
        self.handed_out: list = []

    def get_tensor(self, shape, dtype, name, mem_alloc_context=None):
        import torch

        buffer = torch.empty(shape, dtype=dtype, device=torch.cuda.current_device())
        self.handed_out.append(buffer)
        return buffer

    def baddbmm(self, original):
        def baddbmm(input, *args, **kwargs):
            out = original(input, *args, **kwargs)
            if any(input is buffer for buffer in self.handed_out):
                input.untyped_storage().resize_(0)  # TE's buffer is dropped here
            return out

        return baddbmm


def _take_channels(module, v_channels) -> None:
    """Multi-latent attention's core attention (Megatron passes TE's DotProductAttention
    `k_channels`, the query and key head size, and `v_channels`, the value's): its output
    has `v_channels` per head."""
    if v_channels is not None:
        module.hidden_size_per_partition = module.num_attention_heads_per_partition * v_channels


@functools.cache
def te_unfused_attention_class():
    """Megatron's local DotProductAttention holding what TE's UnfusedDotProductAttention
    holds (`transformer_engine/pytorch/attention/dot_product_attention/backends.py`, TE 2.x):
    the same tensors, a scores buffer of the call instead of the global memory buffer's, TE's
    fused softmax, whose backward writes in place for every mask (apex's masked one does not),
    and with a [b, 1, 1, s] padding mask in self-attention (BERT's) TE's full mask made per
    layer and the masked_fill of the softmax's padded rows, which keeps it. (T5's dataset asks
    TE's version through `get_te_version`, which a trace answers as no TE: its masks are the
    [b, 1, s, s] ones of TE < 1.7, run as before.)"""
    from megatron.core import parallel_state
    from megatron.core.fusions import fused_softmax
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class TEScaledMaskedSoftmax(fused_softmax.ScaledMaskedSoftmax):
        """TE's fused masked softmax (`tex.scaled_masked_softmax_backward`: "Produce gradients
        in place"), where apex's, which Megatron's local attention calls, makes a new one."""

        @staticmethod
        def backward(ctx, output_grads):
            return backward_in_place(output_grads, None), None, None

    class UnfusedDotProductAttention(DotProductAttention):
        """DotProductAttention as TE's unfused backend allocates. Made by memlens for a trace;
        see memlens/plugins/megatron/attention.py."""

        def __init__(self, *args, k_channels=None, v_channels=None, **kwargs):
            super().__init__(*args, **kwargs)
            _take_channels(self, v_channels)  # TE's takes them; the bmm's need no more

        def forward(self, query, key, value, attention_mask, attn_mask_type=None, *args,
                    **kwargs):
            import torch

            mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
            full = None
            if "padding" in mask_type.name and self.attention_type == "self" and \
                    isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4 \
                    and attention_mask.shape[1:3] == (1, 1):
                # TE's softmax takes the full mask
                full = attention_mask = te_full_padding_mask(attention_mask, query.size(0),
                                                             key.size(0))
            buffers = _BuffersOfTheCall()
            with Patcher.swapped(parallel_state, "get_global_memory_buffer", lambda: buffers), \
                    Patcher.swapped(torch, "baddbmm", buffers.baddbmm(torch.baddbmm)), \
                    Patcher.swapped(fused_softmax, "ScaledMaskedSoftmax", TEScaledMaskedSoftmax), \
                    _pad_rows_zeroed(type(self.scale_mask_softmax), full):
                return super().forward(query, key, value, attention_mask, attn_mask_type,
                                       *args, **kwargs)

    return UnfusedDotProductAttention


def te_full_padding_mask(mask, sq: int, sk: int):
    """TE's `get_full_mask` for a self-attention padding mask (bool, True where masked, [b, 1,
    1, s], as Megatron's BERT hands TE >= 1.10; `dot_product_attention/utils.py`, TE 2.x), as
    its unfused backend calls it in each layer: the mask widened to the padded rows,
    [b, 1, s, s], and its sliding-window term (no window: nothing masked, but its
    [b, 1, s, s] int32 bounds are made all the same). The result is a new mask per layer, which
    the masked_fill after the softmax keeps for its backward."""
    import torch

    mask = torch.logical_or(mask.squeeze(1).unsqueeze(3), mask)
    kept = mask.logical_not()
    seqlens_q, seqlens_kv = kept[:, 0, :, 0].sum(dim=1), kept[:, 0, 0, :].sum(dim=1)
    device = mask.device  # (TE's "cuda": the current device, the mask's)
    distance = torch.arange(sq, dtype=torch.int32, device=device).view(1, 1, sq, 1) - \
        torch.arange(sk, dtype=torch.int32, device=device).view(1, 1, 1, sk)
    b = mask.shape[0]
    # window (-1, -1) is (sk, sq); bottom-right aligned, as TE's default
    left = distance.expand(b, 1, sq, sk) + (seqlens_kv - seqlens_q - sk).view(b, 1, 1, 1)
    right = distance.expand(b, 1, sq, sk) + (seqlens_kv - seqlens_q + sq).view(b, 1, 1, 1)
    window = torch.logical_not((left <= 0) & ~(right < 0))
    return torch.logical_or(window, mask)


def _pad_rows_zeroed(softmax_class, full):
    """TE's unfused attention zeroes the padded rows of the softmax's output with an
    out-of-place masked_fill (which saves the full mask) where the mask type is a padding one."""
    if full is None:
        return contextlib.nullcontext()
    forward = softmax_class.forward

    def masked(module, *args, **kwargs):
        return forward(module, *args, **kwargs).masked_fill(full, 0)

    return Patcher.swapped(softmax_class, "forward", masked)


@functools.cache
def flash_attention_class():
    """The stand-in class (made once megatron.core is importable)."""
    import torch
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnBackend, AttnMaskType

    flash = torch.ops.aten._scaled_dot_product_flash_attention.default
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention.default
    # TE's unfused backend (and Megatron's local one) keep the s x s scores, as Megatron's
    # local DotProductAttention does: that module itself stands in for them.
    unfused = (AttnBackend.unfused, AttnBackend.local)

    class _SoftmaxOffsetGradient(torch.autograd.Function):
        """The attention's output, unchanged; in backward, the learnable softmax offset's
        gradient, a new tensor of its shape, as TE's fused attention returns one."""

        @staticmethod
        def forward(ctx, out, offset):
            ctx.offset_shape, ctx.offset_dtype = offset.shape, offset.dtype
            return out.view_as(out)

        @staticmethod
        def backward(ctx, grad):
            return grad, grad.new_zeros(ctx.offset_shape, dtype=ctx.offset_dtype)

    class FlashDotProductAttention(DotProductAttention):
        """DotProductAttention's module (same parameters and checkpoint) with fused attention.
        Made by memlens for a trace; see memlens/plugins/megatron/attention.py."""

        notify = staticmethod(lambda text: None)  # the plugin's note, set for a trace

        def __new__(cls, *args, **kwargs):
            config = kwargs.get("config", args[0] if args else None)
            backend = getattr(config, "attention_backend", AttnBackend.auto)
            cp = getattr(config, "context_parallel_size", 1)
            if backend in unfused and cp > 1:
                raise NotImplementedError(
                    f"attention backend {backend.name} with context parallelism "
                    f"{cp}: Transformer Engine runs context parallelism with its flash and "
                    "fused backends only (--attention-backend flash, fused or auto)")
            if backend == AttnBackend.unfused:
                cls.notify("attention backend unfused: core attention holds what TE's unfused "
                           "attention holds (the s x s scores: softmax output, dropout mask and "
                           "output; their input buffer freed after each call)")
                return te_unfused_attention_class()(*args, **kwargs)
            if backend == AttnBackend.local:
                cls.notify("attention backend local: core attention is Megatron's local "
                           "DotProductAttention (the s x s scores, and their input buffer "
                           "kept in Megatron's global memory buffer)")
                return DotProductAttention(*args, **kwargs)
            cls.notify(f"attention backend {backend.name}: core attention holds what TE's "
                       "fused (flash) attention holds (q, k, v, output, fp32 log-sum-exp; no "
                       "s x s scores)")
            return super().__new__(cls)

        def __init__(self, config, *args, cp_comm_type=None, k_channels=None, v_channels=None,
                     **kwargs):
            self.cp_size = getattr(config, "context_parallel_size", 1)
            if self.cp_size == 1:
                super().__init__(config, *args, cp_comm_type=cp_comm_type, **kwargs)
                _take_channels(self, v_channels)
                return
            if v_channels is not None and v_channels != k_channels:
                raise NotImplementedError(
                    "memlens' stand-in for Transformer Engine attention (TE is not installed "
                    "here) runs context parallelism with one head size for keys and values, "
                    "not multi-latent attention's: a limitation of memlens, not of the "
                    "configuration")
            comm = cp_comm_type or "p2p"
            if comm not in ("p2p", "a2a+p2p", "a2a"):
                raise NotImplementedError(
                    f"memlens' stand-in for Transformer Engine attention (TE is not installed "
                    f"here) runs context parallelism as TE's p2p ring, its all-to-all and "
                    f"their a2a+p2p hierarchy, not cp_comm_type {comm!r}: a limitation of "
                    f"memlens, not of the configuration")
            self.cp_comm_type = comm
            # Megatron's local attention refuses CP (TE's does it): build it without, keep it.
            without_cp = copy.copy(config)
            without_cp.context_parallel_size = 1
            super().__init__(without_cp, *args, cp_comm_type=cp_comm_type, **kwargs)
            self.config = config
            if comm == "a2a+p2p":
                inner, outer = _hierarchy(self.cp_size)
                _heads_divide(self, inner, comm)
                self.notify(f"context parallelism {self.cp_size} (a2a+p2p, {inner} x {outer}): "
                            "core attention holds what TE's hierarchical attention holds (q, "
                            f"k, v exchanged all-to-all within groups of {inner}, then a p2p "
                            f"ring of {outer} over {inner} x s/CP tokens of 1/{inner} of the "
                            "heads)")
            elif comm == "a2a":
                _heads_divide(self, self.cp_size, comm)
                self.notify(f"context parallelism {self.cp_size} (a2a): core attention holds "
                            "what TE's all-to-all attention holds (q, k, v exchanged all-to-all "
                            f"for the whole sequence of 1/{self.cp_size} of the heads)")
            else:
                self.notify(f"context parallelism {self.cp_size}: core attention holds what "
                            "TE's p2p ring attention holds (s/CP tokens per rank, two K/V "
                            "exchange buffers)")

        def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                    attention_bias=None, packed_seq_params=None):
            if packed_seq_params is not None or attention_bias is not None:
                raise NotImplementedError(
                    "memlens' stand-in for Transformer Engine attention (TE is not installed "
                    "here) takes no packed sequences or attention bias: a limitation of "
                    "memlens, not of the configuration")
            s, b = query.shape[0], query.shape[1]
            causal = (attn_mask_type or self.attn_mask_type) == AttnMaskType.causal
            dropout = self.attention_dropout.p if self.training else 0.0
            # TE's flash backend copies each of q, k, v into [b, s, heads, dim] ("bshd") and
            # keeps those copies for backward: not the fused QKV output they were views of
            # (nor, with grouped-query attention, the query copy Megatron's reshape makes).
            q, k, v = (t.transpose(0, 1).contiguous().transpose(1, 2)
                       for t in (query, key, value))
            if self.cp_size > 1:
                out = self._context_parallel(q, k, v, causal, dropout)
            elif v.shape[-1] != q.shape[-1]:
                # Multi-latent attention: values narrower than queries and keys, which TE's
                # fused (cuDNN) backend takes and PyTorch's flash kernel does not; its
                # memory-efficient kernel does, and saves what cuDNN's does (q, k, v, the
                # output and the fp32 log-sum-exp per head and query).
                out = efficient(q, k, v, None, torch.is_grad_enabled(), dropout, causal,
                                scale=self.softmax_scale)[0]
            else:
                out = flash(q, k, v, dropout, causal, scale=self.softmax_scale)[0]
            offset = getattr(self, "softmax_offset", None)
            if isinstance(offset, torch.nn.Parameter) and offset.requires_grad and \
                    torch.is_grad_enabled():
                out = _SoftmaxOffsetGradient.apply(out, offset)
            # The kernel writes its output in the query's layout: back to [s, b, hp], a view.
            return out.permute(2, 0, 1, 3).reshape(s, b, self.hidden_size_per_partition)

        def _context_parallel(self, q, k, v, causal, dropout):
            """Attention as TE's context parallelism of `cp_comm_type` runs it."""
            import torch.distributed as dist
            from megatron.core import parallel_state

            if self.cp_comm_type == "a2a":
                return ulysses_attention_function().apply(
                    q, k, v, parallel_state.get_context_parallel_group(), self.cp_size, causal,
                    dropout, self.softmax_scale)
            a2a, size, rank = None, self.cp_size, parallel_state.get_context_parallel_rank()
            if self.cp_comm_type == "a2a+p2p":  # the ring over the outer group
                inner, ring = parallel_state.get_hierarchical_context_parallel_groups()
                a2a = (inner, dist.get_world_size(inner))
                size, rank = dist.get_world_size(ring), dist.get_rank(ring)
            return ring_attention_function().apply(q, k, v, size, rank, causal, dropout,
                                                   self.softmax_scale, a2a)

    return FlashDotProductAttention


def _hierarchy(cp_size: int) -> tuple[int, int]:
    """The sizes of a2a+p2p's inner (all-to-all) and outer (ring) groups: TE takes the first
    two of Megatron's hierarchical context-parallel groups."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    groups = parallel_state.get_hierarchical_context_parallel_groups(check_initialized=False)
    if not groups or len(groups) != 2:
        raise NotImplementedError(
            f"cp_comm_type a2a+p2p with context parallelism {cp_size} needs two hierarchical "
            "context-parallel groups (--hierarchical-context-parallel-sizes A P, A x P = CP); "
            f"Megatron made {len(groups or [])}")
    return dist.get_world_size(groups[0]), dist.get_world_size(groups[1])


def _heads_divide(attention, size: int, comm: str) -> None:
    """TE's all-to-all hands each of `size` ranks 1/size of the heads: the attention heads and
    the query groups (of this tensor-parallel rank) must divide by it. TE asserts it for a2a
    ("The number of attention heads needs to be divisible by CP size!"), and a2a+p2p's view
    fails on a GPU too."""
    heads = attention.num_attention_heads_per_partition
    groups = attention.num_query_groups_per_partition
    if heads % size or groups % size:
        raise ValueError(
            f"cp_comm_type {comm}: the all-to-all splits each rank's {heads} attention heads and "
            f"{groups} query groups over {size} ranks, which needs both divisible by {size} "
            "(Transformer Engine asserts it on a GPU too)")


def use_flash(spec) -> bool:
    """Swap every DotProductAttention in a layer spec (ModuleSpec tree) for the stand-in;
    True if one was found."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from .spec_swap import swap_in_spec

    return swap_in_spec(spec, lambda value: (
        flash_attention_class() if value is DotProductAttention else None))
