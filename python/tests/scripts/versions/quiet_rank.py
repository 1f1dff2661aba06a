"""A script that silences Python's warnings on every rank but 0, as Megatron-LM's
pretrain_gpt.py does, then imports safetensors (whichever is first on the path)."""
import os
import warnings

if int(os.environ.get("RANK", "0")) != 0:
    warnings.filterwarnings("ignore")

import safetensors.torch  # noqa: E402,F401  (memlens' integration checks its version on import)
import torch  # noqa: E402

model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
