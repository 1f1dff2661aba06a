"""Compiled training steps: the cases the compile exactness tests run twice (for real on the CPU
with Inductor, measured by torch.profiler; and under `memlens run --device cpu`). Tiny models:
real compilation builds every kernel with a C++ compiler.

    python compiled_case.py --model gpt-checkpoint [--iterations 2] [--how module|method|function|eager]
                            [--device cuda]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SEQ, D = 32, 64


class MLP(nn.Module):
    def __init__(self, d=64, hidden=256, graph_break=False):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(d, hidden), nn.Linear(hidden, hidden), \
            nn.Linear(hidden, 10)
        self.graph_break = graph_break

    def forward(self, x):
        x = F.gelu(self.fc2(F.gelu(self.fc1(x))))
        if self.graph_break:  # as a print() or a .item() in a forward would
            torch._dynamo.graph_break()
        return self.head(x)


class GPTBlock(nn.Module):
    def __init__(self, d=D, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def attention(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers=2, checkpointed=False):
        super().__init__()
        self.blocks = nn.ModuleList(GPTBlock() for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, 128)
        self.checkpointed = checkpointed

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(self.ln(x))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d=D, heads=4, kv_heads=2, hidden=172):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wkv = nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        freqs = 1.0 / 10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)
        angles = torch.outer(torch.arange(SEQ).float(), freqs).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k, v = self.wkv(h).view(b, s, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, self.cos, self.sin), rotate(k, self.cos, self.sin)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, s, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def build(name):
    if name in ("mlp", "mlp-graph-break"):
        return MLP(graph_break=name == "mlp-graph-break"), lambda: torch.randn(16, 64)
    if name in ("gpt", "gpt-checkpoint"):
        return GPT(checkpointed=name == "gpt-checkpoint"), lambda: torch.randn(4, SEQ, D)
    if name == "llama":
        return LlamaBlock(), lambda: torch.randn(4, SEQ, D)
    if name == "convnet":
        return ConvNet(), lambda: torch.randn(4, 3, 16, 16)
    raise SystemExit(f"unknown model {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--how", default="module", choices=["module", "method", "function", "eager"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--compile-step", action="store_true", help="torch.compile(opt.step) too")
    args = p.parse_args()
    torch.manual_seed(0)
    model, make_input = build(args.model)
    model = model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if args.how == "module":
        model = torch.compile(model, **({} if args.backend == "inductor" else
                                        {"backend": args.backend}))
    elif args.how == "method":
        model.compile()

    def loss_of(x):
        return model(x).float().pow(2).mean()

    if args.how == "function":
        loss_of = torch.compile(loss_of)

    step = torch.compile(opt.step) if args.compile_step else opt.step
    for _ in range(args.iterations):
        loss = loss_of(make_input().to(args.device))
        loss.backward()
        step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
