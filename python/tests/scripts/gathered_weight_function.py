"""A custom autograd Function over a weight that a library gathers into a new buffer for each
use and keeps state on as a Python attribute (as DeepSpeed ZeRO-3 does with `ds_status`, which
TRL's chunked log-prob reads in backward). 2 steps of SGD on a 1024 x 1024 fp32 weight on the
GPU; backward checks that it got the parameter itself (with its attribute) back."""

import torch


def gather(w):  # the weight in a fresh buffer, as an all-gather makes it
    w.data = torch.empty_like(w.data).copy_(w.data)
    w.status = "available"


class MatmulWithGatheredWeight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        gather(weight)
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        if weight is not W or weight.status != "released":
            raise RuntimeError(f"backward got {type(weight).__name__}, not the weight")
        gather(weight)
        return grad @ weight, grad.t() @ x


W = torch.nn.Parameter(torch.randn(1024, 1024, device="cuda"))
optimizer = torch.optim.SGD([W], lr=0.1)
for _ in range(2):
    x = torch.randn(64, 1024, device="cuda")
    y = MatmulWithGatheredWeight.apply(x, W)
    W.status = "released"  # between forward and backward, as after ZeRO-3's forward
    y.sum().backward()
    optimizer.step()
    optimizer.zero_grad()
