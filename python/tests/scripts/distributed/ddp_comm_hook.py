"""DDP with a gradient-compression comm hook: `torchrun --nproc_per_node 2 ddp_comm_hook.py
[--hook fp16]`.

Model: Linear(4096, 4096, bias=False) twice: 16,777,216 parameters each (64 MiB in fp32). DDP
2.13 starts with one bucket of every gradient (128 MiB; without find_unused_parameters the
first bucketing has no size limit) and after the first backward would rebuild buckets of
`bucket_cap_mb=32` (one per layer here); a trace keeps the first buckets
(patches/torch_distributed_users.py). fp16_compress_hook all-reduces a half-precision copy of
the bucket (64 MiB) with async_op=True and copies the result back. SGD without momentum: no
optimizer state. Input: 8 x 4096 fp32.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--hook", choices=("none", "fp16"), default="none")
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
device = torch.device("cuda", local_rank)

model = nn.Sequential(nn.Linear(4096, 4096, bias=False), nn.Linear(4096, 4096, bias=False))
model = DDP(model.to(device), device_ids=[local_rank], bucket_cap_mb=32)
if args.hook == "fp16":
    model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

for step in range(args.steps):
    x = torch.randn(8, 4096, device=device)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

dist.destroy_process_group()
