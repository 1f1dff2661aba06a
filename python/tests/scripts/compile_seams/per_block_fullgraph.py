"""Twelve identical transformer blocks, each compiled on its own with fullgraph=True, as
torchtitan's --training.compile does (torch.compile per block, registered back in place). On a
GPU the blocks share one compiled graph: Dynamo guards on the block's type and its tensors'
metadata, not on which block it is. More blocks than Dynamo's recompile limit (8) make a trace
that recompiles per block fail with FailOnRecompileLimitHit."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=12)
parser.add_argument("--how", choices=("function", "method"), default="function")
args = parser.parse_args()


class Block(nn.Module):
    def __init__(self, dim=128, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.fc1 = nn.Linear(dim, 4 * dim, bias=False)
        self.fc2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.norm(x)
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(x)))


class Model(nn.Module):
    def __init__(self, layers, dim=128):
        super().__init__()
        self.layers = nn.ModuleDict({str(i): Block(dim) for i in range(layers)})

    def forward(self, x):
        for layer in self.layers.values():
            x = layer(x)
        return x


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Model(args.layers).to(device, torch.bfloat16)
    for name, block in model.layers.named_children():
        if args.how == "function":
            model.layers.register_module(name, torch.compile(block, fullgraph=True))
        else:
            block.compile(fullgraph=True)
    opt = torch.optim.AdamW(model.parameters())
    for step in range(3):
        x = torch.randn(2, 64, 128, device=device, dtype=torch.bfloat16)
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
