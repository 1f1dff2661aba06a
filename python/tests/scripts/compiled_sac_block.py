"""Transformer blocks with op-level selective activation checkpointing, each wrapped in
`checkpoint_wrapper` with a policy from `create_selective_checkpoint_contexts` (save the
matmuls, recompute the rest), then each compiled on its own with fullgraph=True, as torchtitan
applies AC and then compiles per block."""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts


class Block(nn.Module):
    def __init__(self, dim=256, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.fc1 = nn.Linear(dim, 4 * dim, bias=False)
        self.fc2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.silu(self.fc1(x)))


def save_matmuls(ctx, func, *args, **kwargs):
    if func == torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


class Model(nn.Module):
    def __init__(self, layers=2, dim=256):
        super().__init__()
        self.layers = nn.ModuleDict({str(i): Block(dim) for i in range(layers)})

    def forward(self, x):
        for layer in self.layers.values():
            x = layer(x)
        return x


if __name__ == "__main__":
    model = Model().cuda().bfloat16()
    for name, block in model.layers.named_children():
        block = checkpoint_wrapper(block, context_fn=partial(create_selective_checkpoint_contexts,
                                                             save_matmuls))
        model.layers.register_module(name, torch.compile(block, fullgraph=True))
    opt = torch.optim.AdamW(model.parameters())
    for step in range(3):
        x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16)
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
