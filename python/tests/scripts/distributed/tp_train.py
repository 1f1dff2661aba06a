"""Tensor parallelism with DTensor: `torchrun --nproc_per_node T tp_train.py [--sp]`.

A pre-norm MLP block (LayerNorm, up 256 -> 1024, GELU, down 1024 -> 256) parallelised with
`parallelize_module`: `up` column-wise (its weight and bias split by rows over T ranks), `down`
row-wise (its weight split by columns, bias replicated). With --sp the LayerNorm runs sequence
parallel (activations split along the sequence) and the block's input and output are sharded
along the sequence too.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

HIDDEN, BATCH, SEQ = 256, 4, 128


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return self.down(F.gelu(self.up(self.norm(x))))


p = argparse.ArgumentParser()
p.add_argument("--sp", action="store_true", help="sequence parallel LayerNorm")
p.add_argument("--steps", type=int, default=5)
args = p.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if cuda:
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("tp",))

with torch.device(device):
    model = Block()
if args.sp:
    # Megatron-style: the LayerNorm on sequence shards, all-gather into `up`, reduce-scatter
    # out of `down`.
    plan = {"norm": SequenceParallel(),
            "up": ColwiseParallel(input_layouts=Shard(1)),
            "down": RowwiseParallel(output_layouts=Shard(1))}
    model = parallelize_module(model, mesh, plan)
else:
    model = parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
for _ in range(args.steps):
    seq = SEQ // mesh.size() if args.sp else SEQ  # each rank holds its part of the sequence
    x = torch.randn(BATCH, seq, HIDDEN, device=device)
    model(x).float().square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
