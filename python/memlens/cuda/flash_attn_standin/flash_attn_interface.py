"""flash-attn 2.8's Python entry points, on PyTorch's FlashAttention-2 kernels.

As flash-attn does: a head size that is not a multiple of 8 is padded to one (the inputs are
copied, padded) and the output sliced back; the default softmax scale is 1/sqrt(head size)
before padding; inputs whose last dimension is not contiguous are copied. The attention itself
is `aten::_flash_attention_forward`, whose backward is FlashAttention-2's. Sliding windows,
ALiBi and soft-capping change no allocation of FlashAttention-2; windows and ALiBi are passed
on, soft-capping (which PyTorch's kernel does not take) is not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_aten = torch.ops.aten


def _contiguous_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _padded(x: torch.Tensor) -> torch.Tensor:
    pad = -x.shape[-1] % 8
    return F.pad(x, [0, pad]) if pad else x


def _window(window_size) -> dict:
    left, right = window_size
    return {} if (left, right) == (-1, -1) else {"window_size_left": left,
                                                  "window_size_right": right}


def _attention(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal,
               window_size, alibi_slopes, return_attn_probs):
    head = q.shape[-1]
    scale = head ** -0.5 if softmax_scale is None else softmax_scale
    q, k, v = (_padded(_contiguous_last(x)) for x in (q, k, v))
    out, lse, *_ = _aten._flash_attention_forward(
        q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, causal, False, scale=scale,
        alibi_slopes=alibi_slopes, **_window(window_size))
    out = out[..., :head]
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """q: (batch, seqlen_q, heads, head size); k, v: (batch, seqlen_k, heads_k, head size)."""
    return _attention(q, k, v, None, None, q.shape[1], k.shape[1], dropout_p, softmax_scale,
                      causal, window_size, alibi_slopes, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q: (total_q, heads, head size), the sequences packed; cu_seqlens_*: (batch + 1,) int32
    offsets of each sequence."""
    if block_table is not None:
        raise NotImplementedError("flash_attn_varlen_func with a paged KV cache (block_table): "
                                  "memlens' flash-attn stand-in traces training, not paged "
                                  "inference")
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv: (batch, seqlen, 3, heads, head size)."""
    q, k, v = qkv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """kv: (batch, seqlen_k, 2, heads_k, head size)."""
    k, v = kv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv: (total, 3, heads, head size)."""
    q, k, v = qkv.unbind(dim=1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """kv: (total_k, 2, heads_k, head size)."""
    k, v = kv.unbind(dim=1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_with_kvcache(*args, **kwargs):
    raise NotImplementedError("flash_attn_with_kvcache (decoding with a KV cache): memlens' "
                              "flash-attn stand-in traces training, not this inference path")
