"""An MLP trained with a hand-written update `p -= lr * p.grad` (no torch.optim), a fresh random
batch each step, as small tutorials write it."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()

model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))

for step in range(args.steps):
    x = torch.randn(args.batch_size, 256)
    y = torch.randn(args.batch_size, 256)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= args.lr * p.grad
            p.grad = None
    print(f"step {step}: loss {loss.item():.4f}")
