"""A 2 GiB model built on the CPU, then moved to the GPU, as most scripts do it."""
import torch
import torch.nn as nn

model = nn.Sequential(*[nn.Linear(8192, 8192, bias=False) for _ in range(8)])
model.to("cuda")
out = model(torch.randn(4, 8192, device="cuda")).sum()
out.backward()
