"""One attention block trained for two steps, in bf16, for the SDPA backend tests.

    python sdpa_block.py [--toggle none|no-flash|no-cudnn|only-efficient|only-math|deprioritize]
                         [--sac none|plain|save-flash|recompute-all] [--dropout P] [--heads-kv N] [--seq S]

Shapes: batch 2, 4 query heads, 100 tokens (--seq), head size 64 (model width 256), causal."""

import argparse
import os
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                    create_selective_checkpoint_contexts)

p = argparse.ArgumentParser()
p.add_argument("--toggle", default="none")
p.add_argument("--sac", default="none")
p.add_argument("--dropout", type=float, default=0.0)
p.add_argument("--heads-kv", type=int, default=4)
p.add_argument("--seq", type=int, default=100)
args = p.parse_args()

if args.toggle == "deprioritize":
    os.environ["TORCH_CUDNN_SDPA_DEPRIORITIZED"] = "1"  # before the first attention call
if args.toggle == "no-flash":
    torch.backends.cuda.enable_flash_sdp(False)
if args.toggle == "no-cudnn":
    torch.backends.cuda.enable_cudnn_sdp(False)
if args.toggle == "no-cudnn-no-flash":
    torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cuda.enable_flash_sdp(False)
KERNELS = {"only-efficient": [SDPBackend.EFFICIENT_ATTENTION], "only-math": [SDPBackend.MATH]}

B, S, H, D = 2, args.seq, 4, 64


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        kv = args.heads_kv * D
        self.q = nn.Linear(H * D, H * D, bias=False)
        self.kv = nn.Linear(H * D, 2 * kv, bias=False)
        self.out = nn.Linear(H * D, H * D, bias=False)

    def forward(self, x):
        q = self.q(x).view(B, S, H, D).transpose(1, 2)
        k, v = (t.view(B, S, args.heads_kv, D).transpose(1, 2) for t in self.kv(x).chunk(2, -1))
        if args.toggle in KERNELS:
            with sdpa_kernel(KERNELS[args.toggle]):
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout, is_causal=True,
                                                   enable_gqa=args.heads_kv != H)
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout, is_causal=True,
                                               enable_gqa=args.heads_kv != H)
        return self.out(y.transpose(1, 2).reshape(B, S, H * D))


def policy(save, ctx, func, *a, **kw):
    if func in save:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()

    def forward(self, x):
        if args.sac == "none":
            return x + self.attention(x)
        if args.sac == "plain":  # everything recomputed in backward
            return x + checkpoint(self.attention, x, use_reentrant=False)
        save = {torch.ops.aten._scaled_dot_product_flash_attention.default} \
            if args.sac == "save-flash" else set()
        context = partial(create_selective_checkpoint_contexts, partial(policy, save))
        return x + checkpoint(self.attention, x, use_reentrant=False, context_fn=context)


model = Block().cuda().to(torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(B, S, H * D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
