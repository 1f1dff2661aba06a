"""A fused kernel compiled with torch.compile and warmed up before the model is built, as
megatron-core's jit fusions are (Megatron-LM's initialize runs bias-SwiGLU with inputs that
require grad, forward only); then a plain training loop."""

import torch
import torch.nn.functional as F


@torch.compile
def bias_swiglu(y, bias):
    a, b = torch.chunk(y + bias, 2, -1)
    return F.silu(a) * b


bias = torch.rand(512, device="cuda", dtype=torch.bfloat16)
x = torch.rand(64, 2, 512, device="cuda", dtype=torch.bfloat16)
for bias_grad, x_grad in ((True, False), (True, True)):
    bias.requires_grad, x.requires_grad = bias_grad, x_grad
    for _ in range(3):
        out = bias_swiglu(x, bias)
del bias, x, out

model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
for step in range(3):
    loss = model(torch.randn(32, 1024, device="cuda")).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
