"""A model whose forward raises: the trace fails at the `raise` line (line 16)."""

import torch.nn as nn


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return self.project(h)

    def project(self, h):
        raise RuntimeError("projection is not implemented yet")
