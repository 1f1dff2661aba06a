"""2-D parallelism: FSDP2 over data parallel ranks, tensor parallelism inside each group:
`torchrun --nproc_per_node 8 fsdp_tp_train.py --tp 2` (mesh dp x tp = 4 x 2).

The block of tp_train.py (LayerNorm, up 256 -> 1024, down 1024 -> 256), twice: first
parallelised column-/row-wise over `tp`, then fully_shard-ed over `dp`."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

HIDDEN = 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=2)
args = p.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if cuda:
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
world = dist.get_world_size()
mesh = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
with torch.device(device):
    model = nn.Sequential(Block(), Block())
for block in model:
    parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(block, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(5):
    x = torch.randn(4, 128, HIDDEN, device=device)
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
