"""torch.compile(mode="max-autotune") with its CUDA graphs turned off by an option, as training
code that needs its memory headroom writes it: one SGD step of a bias-free MLP."""

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(1024, 1024, bias=False), nn.ReLU(),
                      nn.Linear(1024, 1024, bias=False)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model, mode="max-autotune", options={"triton.cudagraphs": False})
for step in range(3):
    optimizer.zero_grad(set_to_none=True)
    compiled(torch.randn(512, 1024, device="cuda")).square().mean().backward()
    optimizer.step()
