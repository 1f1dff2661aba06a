"""A training loop that trains for a long time and, after `--busy-after` steps, spins in
Python code (a data pipeline waiting on something) without running any tensor op."""
import argparse
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--busy-after", type=int, default=2)
args = parser.parse_args()

model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128))
optimizer = torch.optim.Adam(model.parameters())
step = 0
while True:
    if step == args.busy_after:
        spins = 0
        while True:  # blocked in Python code, no op for the tracer to stop at
            spins += 1
    x = torch.randn(32, 128)
    try:
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    except KeyboardInterrupt:  # scripts catch Ctrl-C to "stop early" and carry on
        print("caught KeyboardInterrupt, carrying on")
    step += 1
    time.sleep(0.01)
