"""An attention block that calls flash-attn itself, as research code does: bf16, grouped-query
attention (8 query heads, 2 key/value heads, head size 64) on (batch, seqlen, heads, head size)
tensors with `flash_attn_func(..., causal=True)`; 2 training steps with AdamW."""

import torch
from flash_attn import flash_attn_func
from torch import nn

B, S, H, KV, D = 4, 1000, 8, 2, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(H * D, H * D, bias=False)
        self.kv = nn.Linear(H * D, 2 * KV * D, bias=False)
        self.o = nn.Linear(H * D, H * D, bias=False)

    def forward(self, x):
        q = self.q(x).view(B, S, H, D)
        k, v = self.kv(x).view(B, S, 2, KV, D).unbind(2)
        return self.o(flash_attn_func(q, k, v, causal=True).reshape(B, S, H * D))


model = Block().cuda().bfloat16()
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    x = torch.randn(B, S, H * D, device="cuda", dtype=torch.bfloat16)
    model(x).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
