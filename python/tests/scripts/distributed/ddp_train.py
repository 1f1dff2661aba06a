"""DDP training script: `torchrun --nproc_per_node 4 ddp_train.py [--bucket-view] [--layers N]`.

Model: 4 Linear(512, 512) layers with biases: 4 x 262,656 = 1,050,624 parameters (4,202,496
bytes in fp32). DDP keeps the gradients of each bucket in one flat buffer: a second copy of the
gradients, unless `gradient_as_bucket_view=True` makes the gradients views of the buckets.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--bucket-view", action="store_true", help="gradient_as_bucket_view=True")
p.add_argument("--bucket-mb", type=float, default=25.0)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--layers", type=int, default=4)
args = p.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if cuda:
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(args.layers)]).to(device)
model = DDP(model, device_ids=[local_rank] if cuda else None,
            bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=args.bucket_view)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(args.steps):
    x = torch.randn(8, 512, device=device)
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
