"""Mixed-precision training as PyTorch users write it: fp32 weights, bf16 autocast, AdamW."""
import torch
import torch.nn as nn

model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    x = torch.randn(64, 1024, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
