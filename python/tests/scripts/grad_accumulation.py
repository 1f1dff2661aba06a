"""Gradient accumulation: several forward/backward passes (micro-batches) per optimizer step,
the loss scaled by the number of micro-batches, as in nanoGPT-style loops."""
import argparse
import sys

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--accumulation-steps", type=int, default=4)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

micro = 0
for step in range(args.steps):
    for k in range(args.accumulation_steps):
        x = torch.randn(8, 64)
        loss = model(x).pow(2).mean() / args.accumulation_steps
        loss.backward()
        micro += 1
        print(f"micro-batch {micro}", file=sys.stderr)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
