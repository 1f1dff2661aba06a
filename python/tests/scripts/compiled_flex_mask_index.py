"""Compiled FlexAttention whose mask reads a captured tensor by an integer index, as the
load-balanced masks of torch's context parallelism do (`indices[0][q_idx]`): Inductor lowers
it into its flex template, which makes no scores matrix."""

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

BATCH, HEADS, SEQ, HEAD_DIM = 2, 4, 256, 64
order = torch.arange(SEQ, device="cuda", dtype=torch.int32).view(1, SEQ)  # a rearrangement


def mask_mod(b, h, q_idx, kv_idx):
    return order[0][q_idx] >= order[0][kv_idx]


q, k, v = (torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, device="cuda", dtype=torch.bfloat16,
                       requires_grad=True) for _ in range(3))
mask = create_block_mask(mask_mod, BATCH, None, SEQ, SEQ, device="cuda")
attention = torch.compile(flex_attention)
for _ in range(2):
    attention(q, k, v, block_mask=mask).float().pow(2).mean().backward()
