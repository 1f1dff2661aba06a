"""LLM.int8() inference weights under a trained head: an fp16 Linear(256, 512) loaded into
bitsandbytes' `Linear8bitLt` (has_fp16_weights=False: int8 weights quantized by `.cuda()`),
a trainable fp16 Linear(512, 8) on top, bitsandbytes' blockwise 8-bit AdamW over the head."""

import bitsandbytes as bnb, torch
from torch import nn
lin = nn.Linear(256, 512, bias=True).half()
q = bnb.nn.Linear8bitLt(256, 512, bias=True, has_fp16_weights=False)
q.load_state_dict(lin.state_dict())
q = q.cuda()
head = nn.Linear(512, 8).cuda().half()
opt = bnb.optim.AdamW8bit(head.parameters(), lr=1e-3)
for i in range(3):
    x = torch.randn(16, 256, device="cuda", dtype=torch.half)
    head(q(x)).float().pow(2).mean().backward()
    opt.step(); opt.zero_grad()
