"""Core attention as Transformer Engine's attention backends hold memory, for configurations
that ask for Transformer Engine where it is not installed.

`attention_backend` (`--attention-backend`) picks TE's backend: flash and fused (cuDNN) keep
no s x s scores, and `auto` picks one of them on every GPU memlens simulates (all sm80 or
newer, which both need); unfused and local keep them, as Megatron's local attention does,
which then runs itself.

Megatron's local `DotProductAttention` materialises the s x s scores (softmax output, dropout
mask and output: 5 a s^2 b bytes per layer), which TE's fused attention never does; at long
sequences the difference is most of the activations. This stand-in calls PyTorch's flash
attention kernel on q, k, v copied into the [b, s, heads, dim] layout, as TE's flash backend
copies them, so it saves what TE saves: those copies (q of all heads, k and v of the query
groups only: grouped-query attention needs no repeated keys or values; the QKV projection's
output they came from is freed), the output, and the fp32 softmax log-sum-exp per head and
query.
"""

from __future__ import annotations

import functools


@functools.cache
def flash_attention_class():
    """The stand-in class (made once megatron.core is importable)."""
    import torch
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnBackend, AttnMaskType

    flash = torch.ops.aten._scaled_dot_product_flash_attention.default
    # TE's unfused backend (and Megatron's local one) keep the s x s scores, as Megatron's
    # local DotProductAttention does: that module itself stands in for them.
    unfused = (AttnBackend.unfused, AttnBackend.local)

    class FlashDotProductAttention(DotProductAttention):
        """DotProductAttention's module (same parameters and checkpoint) with fused attention.
        Made by memlens for a trace; see memlens/plugins/megatron_attention.py."""

        notify = staticmethod(lambda text: None)  # the plugin's note, set for a trace

        def __new__(cls, *args, **kwargs):
            config = kwargs.get("config", args[0] if args else None)
            backend = getattr(config, "attention_backend", AttnBackend.auto)
            if backend in unfused:
                cls.notify(f"attention backend {backend.name}: core attention is Megatron's "
                           "local DotProductAttention, which keeps the s x s scores as TE's "
                           "unfused attention does (softmax output, dropout mask and output)")
                return DotProductAttention(*args, **kwargs)
            cls.notify(f"attention backend {backend.name}: core attention holds what TE's "
                       "fused (flash) attention holds (q, k, v, output, fp32 log-sum-exp; no "
                       "s x s scores)")
            return super().__new__(cls)

        def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                    attention_bias=None, packed_seq_params=None):
            assert packed_seq_params is None and attention_bias is None, \
                "memlens' stand-in for TE attention takes no packed sequences or bias"
            s, b = query.shape[0], query.shape[1]
            causal = (attn_mask_type or self.attn_mask_type) == AttnMaskType.causal
            dropout = self.attention_dropout.p if self.training else 0.0
            # TE's flash backend copies each of q, k, v into [b, s, heads, dim] ("bshd") and
            # keeps those copies for backward: not the fused QKV output they were views of
            # (nor, with grouped-query attention, the query copy Megatron's reshape makes).
            q, k, v = (t.transpose(0, 1).contiguous().transpose(1, 2)
                       for t in (query, key, value))
            out = flash(q, k, v, dropout, causal, scale=self.softmax_scale)[0]
            # The kernel writes its output in the query's layout: back to [s, b, hp], a view.
            return out.permute(2, 0, 1, 3).reshape(s, b, self.hidden_size_per_partition)

    return FlashDotProductAttention


def use_flash(spec) -> bool:
    """Swap every DotProductAttention in a layer spec (ModuleSpec tree) for the stand-in;
    True if one was found."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    found = False
    todo, seen = [spec], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        submodules = getattr(node, "submodules", None)
        if submodules is None:
            continue
        for name, value in list(vars(submodules).items()):
            if value is DotProductAttention:
                setattr(submodules, name, flash_attention_class())
                found = True
            elif hasattr(value, "submodules"):
                todo.append(value)
            elif isinstance(value, (list, tuple)):
                todo.extend(v for v in value if hasattr(v, "submodules"))
    return found
