"""A stack of GPT layers built to the conditions of Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models"): pure bf16, GeLU MLP of width 4h with
biases, LayerNorm, attention that materialises the scores (or SDPA), dropout on the attention
probabilities and after both projections.

    python korthikanti_layer.py --layers 2 [--attention eager|sdpa] [--dropout 0.1]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=2)
p.add_argument("--attention", choices=["eager", "sdpa"], default="eager")
p.add_argument("--dropout", type=float, default=0.1)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--hidden", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--batch", type=int, default=1)
args = p.parse_args()
H, A = args.hidden, args.heads


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.qkv, self.proj = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.fc, self.out = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)
        self.drop_attn, self.drop1, self.drop2 = (nn.Dropout(args.dropout) for _ in range(3))

    def attention(self, q, k, v):
        if args.attention == "sdpa":
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        return self.drop_attn(scores.softmax(-1)) @ v

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(H, dim=-1)
        q, k, v = (t.view(b, s, A, H // A).transpose(1, 2) for t in (q, k, v))
        y = self.attention(q, k, v).transpose(1, 2).reshape(b, s, H)
        x = x + self.drop1(self.proj(y))
        return x + self.drop2(self.out(F.gelu(self.fc(self.ln2(x)))))


torch.set_default_dtype(torch.bfloat16)
model = nn.Sequential(*[Layer() for _ in range(args.layers)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(2):
    x = torch.randn(args.batch, args.seq, H, device="cuda", requires_grad=True)
    model(x).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
