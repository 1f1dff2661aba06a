"""nanoGPT's causal self-attention, compiled with dynamic shapes: SDPA called with keyword
arguments (`attn_mask=None, dropout_p=..., is_causal=True`), its dropout on in training. With
--checkpoint two such blocks run in sequence, each under torch.utils.checkpoint inside the
compiled model."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", action="store_true")
args = parser.parse_args()


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd=256, n_head=4, dropout=0.1):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head, self.dropout = n_head, dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(CausalSelfAttention() for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


if __name__ == "__main__":
    model = (Checkpointed() if args.checkpoint else CausalSelfAttention()).cuda().bfloat16()
    model = torch.compile(model, dynamic=True)
    opt = torch.optim.AdamW(model.parameters())
    for step in range(3):
        x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16)
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
