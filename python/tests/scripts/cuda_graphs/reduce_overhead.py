"""torch.compile(mode="reduce-overhead") training as the PyTorch tutorials write it: Inductor
runs the compiled forward and backward through its CUDA graph trees (a warm-up step, a
recording step, then replays). Prints the caching allocator's counters after each step
(`MARK step<i> allocated reserved`). A bias-free MLP in fp32: a (512, 1024) activation is
2 MiB, a 1024 x 1024 weight or its gradient 4 MiB."""

import torch
import torch.nn as nn


def mark(name):
    print("MARK", name, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), flush=True)


model = nn.Sequential(nn.Linear(1024, 1024, bias=False), nn.ReLU(),
                      nn.Linear(1024, 1024, bias=False)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model, mode="reduce-overhead")
for step in range(4):
    x = torch.randn(512, 1024, device="cuda")
    optimizer.zero_grad(set_to_none=True)
    loss = compiled(x).square().mean()
    loss.backward()
    optimizer.step()
    mark(f"step{step}")
