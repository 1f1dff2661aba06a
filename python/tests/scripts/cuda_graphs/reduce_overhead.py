"""torch.compile(mode="reduce-overhead") training as the PyTorch tutorials write it: Inductor
runs the compiled forward and backward through its CUDA graph trees (a warm-up step, a
recording step, then replays), then evaluates under no_grad (an inference graph: warm-up,
recording, replay). Prints the caching allocator's counters after each step
(`MARK step<i> allocated reserved`) and after the evaluation. A bias-free MLP in fp32: a
(512, 1024) activation is 2 MiB, a 1024 x 1024 weight or its gradient 4 MiB."""

import torch
import torch.nn as nn


def mark(name):
    print("MARK", name, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), flush=True)


model = nn.Sequential(nn.Linear(1024, 1024, bias=False), nn.ReLU(),
                      nn.Linear(1024, 1024, bias=False)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model, mode="reduce-overhead")
for step in range(4):
    torch.compiler.cudagraph_mark_step_begin()  # as the CUDA graph trees' docs advise
    x = torch.randn(512, 1024, device="cuda")
    optimizer.zero_grad(set_to_none=True)
    loss = compiled(x).square().mean()
    loss.backward()
    optimizer.step()
    mark(f"step{step}")

with torch.no_grad():
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        y = compiled(torch.randn(512, 1024, device="cuda"))
mark("eval")
