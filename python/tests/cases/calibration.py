"""Workloads measured on a real GPU (bench/gpu_calibration.py) and estimated by memlens
(tests/cuda/test_gpu_calibration.py): the same script, two iterations, on cuda:0.

    python calibration.py --case grow|churn|mlp

grow  - matmul + relu per iteration, one output kept: big blocks, cached segments reused.
churn - many blocks of mixed sizes, every other one freed, then bigger ones: fragmentation,
        splitting and the small pool.
mlp   - a 3-layer MLP training step with AdamW (needs autograd on the fake CUDA device).
"""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--case", required=True, choices=["grow", "churn", "mlp"])
args = p.parse_args()
DEVICE = "cuda:0"
ITERATIONS = 2
MiB = 1 << 20


class Step(nn.Module):  # no parameters: marks the iterations for memlens
    def forward(self, x, w):
        return torch.relu(x @ w)


def grow():
    step, kept = Step(), []
    w = torch.randn(4096, 4096, device=DEVICE)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    for _ in range(ITERATIONS):
        x = torch.randn(8, 4096, 4096, device=DEVICE)
        with torch.no_grad():
            kept.append(step(x, w))
        del x
        opt.step()


def churn():
    step, kept = Step(), []
    w = torch.randn(256, 256, device=DEVICE)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sizes = [(i * 7919) % 97 * MiB // 5 + 512 * (i % 7) + 100 for i in range(300)]
    for _ in range(ITERATIONS):
        with torch.no_grad():
            kept.append(step(torch.randn(64, 256, device=DEVICE), w))
        blocks = [torch.empty(n, dtype=torch.uint8, device=DEVICE) for n in sizes]
        del blocks[::2]
        bigger = [torch.empty(n * 3 // 2, dtype=torch.uint8, device=DEVICE) for n in sizes[:80]]
        kept.append(blocks[-1])
        del blocks, bigger
        opt.step()


def mlp():
    model = nn.Sequential(nn.Linear(1024, 4096, device=DEVICE), nn.GELU(),
                          nn.Linear(4096, 4096, device=DEVICE), nn.GELU(),
                          nn.Linear(4096, 1024, device=DEVICE))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(ITERATIONS):
        x = torch.randn(256, 1024, device=DEVICE)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


{"grow": grow, "churn": churn, "mlp": mlp}[args.case]()
