"""One Llama-style transformer block (RMSNorm, causal attention, SwiGLU MLP) trained in FP8
with torchao: every Linear becomes a Float8Linear.

    python llama_block_float8.py tensorwise|rowwise|bf16
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

DIM, HEADS, FFN, SEQ, BATCH = 2048, 16, 5632, 2048, 2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, HEADS, DIM // HEADS).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, DIM))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


parser = argparse.ArgumentParser()
parser.add_argument("recipe", choices=["tensorwise", "rowwise", "bf16"])
args = parser.parse_args()

model = Block().to("cuda", torch.bfloat16)
if args.recipe != "bf16":
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(args.recipe))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(2):
    x = torch.randn(BATCH, SEQ, DIM, device="cuda", dtype=torch.bfloat16)
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
