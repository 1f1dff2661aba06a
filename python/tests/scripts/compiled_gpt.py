"""A small GPT compiled the ways training scripts compile: torch.compile(model) with or without
arguments, model.compile(), and @torch.compile on a helper function (bare and with arguments)."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--how", choices=("plain", "fullgraph", "mode", "method", "none"),
                    default="plain")
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()


@torch.compile
def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


@torch.compile(dynamic=False, backend="inductor")
def scaled_residual(x, y):
    return x + 0.5 * y


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return scaled_residual(x, self.proj(new_gelu(self.fc(self.ln_2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab=256, block_size=32, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if args.how == "plain":
    model = torch.compile(model)
elif args.how == "fullgraph":
    model = torch.compile(model, fullgraph=True)
elif args.how == "mode":
    model = torch.compile(model, mode="max-autotune", dynamic=True)
elif args.how == "method":
    model.compile()

for step in range(args.steps):
    idx = torch.randint(0, 256, (4, 32))
    loss = model(idx, torch.roll(idx, -1, 1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
