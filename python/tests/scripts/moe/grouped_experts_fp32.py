"""Experts of a mixture-of-experts layer as transformers runs them on a GPU: the routed tokens
sorted by expert and multiplied by every expert's weight in one `F.grouped_mm`, in float32
(an fp32 model under autocast keeps its experts' weights fp32, and transformers casts the input
to the weight's dtype). 256 routed rows, 4 experts of 64 rows each, hidden 128, expert width
256; 2 training steps with SGD."""

import torch
import torch.nn.functional as F
from torch import nn

ROWS, EXPERTS, HIDDEN, WIDTH = 256, 4, 128, 256
grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm


class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Parameter(torch.randn(EXPERTS, HIDDEN, WIDTH) * 0.02)
        self.down = nn.Parameter(torch.randn(EXPERTS, WIDTH, HIDDEN) * 0.02)

    def forward(self, x, offs):
        return grouped_mm(F.silu(grouped_mm(x, self.up, offs=offs)), self.down, offs=offs)


experts = Experts().cuda()
opt = torch.optim.SGD(experts.parameters(), lr=0.1)
offs = torch.arange(1, EXPERTS + 1, dtype=torch.int32, device="cuda") * (ROWS // EXPERTS)
for _ in range(2):
    x = torch.randn(ROWS, HIDDEN, device="cuda", requires_grad=True)
    experts(x, offs).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
