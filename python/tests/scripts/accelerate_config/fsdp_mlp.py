"""A training loop written for `accelerate launch --config_file fsdp2.yaml fsdp_mlp.py` (or
zero2.yaml): the distribution (FSDP2, DeepSpeed or neither), mixed precision and wrapping come
from what accelerate launch tells the script (ACCELERATE_* / FSDP_* variables), not from this
file. A DataLoader of 96 samples, batches of 8 (DeepSpeed's micro-batch size comes from it),
sharded by accelerate: 3 steps on each of 4 ranks.

The model: 2 blocks of Linear(256, 256) (bias) + ReLU, then Linear(256, 256): 3 x 65,792
parameters. Writes its accelerate environment and the plugin it was given to `--report`."""

import argparse
import json
import os

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--report", required=True)
args = parser.parse_args()

accelerator = Accelerator()
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                      nn.Linear(256, 256))  # on the CPU: accelerate moves it
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(96, 256)), batch_size=8)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
plugin = getattr(accelerator.state, "fsdp_plugin", None)  # absent under DeepSpeed
with open(args.report.replace("{rank}", os.environ.get("RANK", "0")), "w") as f:
    json.dump({"env": {k: v for k, v in os.environ.items() if k.startswith(("ACCELERATE_", "FSDP_"))},
               "distributed_type": str(accelerator.distributed_type),
               "num_processes": accelerator.num_processes,
               "fsdp_version": plugin.fsdp_version if plugin else None,
               "mixed_precision": accelerator.mixed_precision}, f)
for (x,) in loader:
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
