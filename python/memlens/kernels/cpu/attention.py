"""Attention kernels on the CPU.

`_safe_softmax` (aten/src/ATen/native/SoftMax.cpp, the math path of scaled_dot_product_attention
with a mask): after the softmax output, a boolean `isneginf` mask of the input, its `all` over
`dim` (keepdim), and a 0-dim zero of the output dtype.

`_scaled_dot_product_flash_attention_for_cpu` (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp
`cpu_flash_attention`): per thread, an accumulation-type block (qk, row max, row sum, dst) of
qSplit * kvSplit + 2 * qSplit + qSplit * headSize, and for bf16/fp16 a reduced-type qk block
(qSplit * kvSplit); qSplit is 256/64/32 for query lengths >= 768/>= 192/shorter, kvSplit 512,
both capped by the lengths. Its backward (`cpu_flash_attention_backward`) allocates, after the
three gradients, `grad_out.contiguous()` of its (batch, length, heads, head size) view (a copy
unless grad_out is laid out that way, as the gradient of `out.transpose(1, 2)` is), per thread two
accumulation-type blocks qSplit * kvSplit (and two reduced-type ones for bf16/fp16), and the
main thread's `dsum` (qSplit). Worker threads' own allocations are not recorded by the profiler
and are left out.
For bf16/fp16 these are a lower bound: torch 2.13 also packs K and V for oneDNN brgemm when a
heuristic we have not derived says so (measured: about two copies of K plus a qk block), and its
backward allocates brgemm buffers per block.
"""

from __future__ import annotations

import torch


def safe_softmax(args, kwargs, out):
    x, dim = args[0], args[1]
    size = x.shape[dim] if x.dim() else 1
    return [x.numel(), x.numel() // max(size, 1), out.element_size()]


def _splits(q_len: int, kv_len: int) -> tuple[int, int]:
    q_split = 256 if q_len >= 768 else 64 if q_len >= 192 else 32
    return min(q_split, q_len), min(512, kv_len)


def _reduced(t: torch.Tensor) -> bool:
    return t.dtype in (torch.bfloat16, torch.float16)


def _accumulation(t: torch.Tensor) -> int:
    return 8 if t.dtype == torch.float64 else 4


def flash_attention(args, kwargs, out):
    q, k = args[0], args[1]  # (batch, heads, length, head size)
    q_split, kv_split = _splits(q.shape[2], k.shape[2])
    threads, head = torch.get_num_threads(), q.shape[3]
    sizes = [threads * (q_split * kv_split + 2 * q_split + q_split * head) * _accumulation(q)]
    if _reduced(q):
        sizes.append(threads * q_split * kv_split * q.element_size())
    return sizes


def flash_attention_backward(args, kwargs, out):
    grad_out, q, k = args[0], args[1], args[2]
    q_split, kv_split = _splits(q.shape[2], k.shape[2])
    threads = torch.get_num_threads()
    copy = 0 if grad_out.transpose(1, 2).is_contiguous() else \
        grad_out.numel() * grad_out.element_size()
    sizes = [copy, threads * 2 * q_split * kv_split * _accumulation(q)]
    if _reduced(q):
        sizes.append(threads * 2 * q_split * kv_split * q.element_size())
    sizes.append(q_split * _accumulation(q))
    return sizes
