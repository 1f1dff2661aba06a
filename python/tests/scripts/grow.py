"""A step that keeps one output per iteration (a cache that grows), with plain tensor ops on
cuda:0 and no autograd: on h100-80gb, --batch 320 runs out of memory in the second forward,
--batch 160 fits. Each tensor is batch x 4096 x 4096 fp32 = batch x 64 MiB."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=4)
args = parser.parse_args()


class Step(nn.Module):
    def forward(self, x, w):
        h = x @ w  # mm: the first one also takes the cuBLAS workspace
        return torch.relu(h)  # the allocation that does not fit


model = Step()
w = torch.randn(4096, 4096, device="cuda:0")
opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # marks the iterations
kept = []


def train_step():
    x = torch.randn(args.batch, 4096, 4096, device="cuda:0")
    with torch.no_grad():
        kept.append(model(x, w))
    opt.step()


for _ in range(3):
    train_step()
