"""Causal self-attention with FlexAttention called eagerly (no torch.compile): torch runs its
math implementation, which materializes the scores. Evaluation by default (two forwards under
no_grad, which the CPU runs for real too: eager FlexAttention has no CPU backward); `--train`
takes two AdamW steps instead. `--no-dynamo` calls the operator directly, as FlexAttention's
debug switch does, instead of through Dynamo's eager backend: run for real through Dynamo, the
previous call's contiguous copies of query, key and value stay allocated until the next call
(measured, not modelled by memlens, which runs the region without Dynamo).

    python flex_attention_eager.py --device cpu|cuda [--train] [--no-dynamo]
"""

import argparse

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda")
p.add_argument("--train", action="store_true")
p.add_argument("--no-dynamo", action="store_true")
args = p.parse_args()
if args.no_dynamo:
    import torch.nn.attention.flex_attention as flex_module

    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
torch.manual_seed(0)
BATCH, SEQ, DIM, HEADS = 2, 128, 128, 4


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, HEADS, d // HEADS).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=2))
        y = flex_attention(q, k, v, block_mask=mask)
        return x + self.proj(y.transpose(1, 2).reshape(b, s, d))


model = nn.Sequential(*[Attention() for _ in range(2)]).to(args.device)
mask = create_block_mask(causal, None, None, SEQ, SEQ, device=args.device)


def forward(x):
    for layer in model:
        x = layer(x, mask)
    return x


if args.train:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        forward(torch.randn(BATCH, SEQ, DIM, device=args.device)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
else:
    with torch.no_grad():
        for _ in range(2):
            model[0](torch.randn(BATCH, SEQ, DIM, device=args.device), mask)
