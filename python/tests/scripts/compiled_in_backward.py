"""A fused bias-GeLU whose forward and backward are compiled helper functions, the backward one
called from the autograd Function's backward, as Megatron-style fused activations are. Autograd
runs a CUDA backward on its device thread, so the backward helper compiles there; the script
writes what that thread's Inductor settings were, and how many compile-worker pools exist, to
the JSON file named by its first argument."""
import json
import sys
import threading

import torch
import torch._inductor.async_compile as async_compile
import torch._inductor.config as inductor_config
import torch.nn as nn

seen = {}


@torch.compile
def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@torch.compile
def bias_gelu_back(g, bias, y):
    x = bias + y
    t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
    return ff * g


class BiasGeLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, bias):
        ctx.save_for_backward(y, bias)
        return bias_gelu(bias, y)

    @staticmethod
    def backward(ctx, grad):
        seen.setdefault("other_thread", threading.current_thread() is not threading.main_thread())
        seen.setdefault("compile_threads", inductor_config.compile_threads)
        seen.setdefault("fx_graph_cache", inductor_config.fx_graph_cache)
        y, bias = ctx.saved_tensors
        g = bias_gelu_back(grad, bias, y)
        return g, g.sum(0)


class FusedMLP(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(4 * dim))
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2(BiasGeLU.apply(self.fc1(x), self.bias))


if __name__ == "__main__":
    model = FusedMLP().cuda()
    opt = torch.optim.AdamW(model.parameters())
    for step in range(2):
        model(torch.randn(64, 512, device="cuda")).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    seen["pools"] = len(async_compile._pool_set)
    with open(sys.argv[1], "w") as f:
        json.dump(seen, f)
