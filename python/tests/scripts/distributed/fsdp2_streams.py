"""FSDP2 on one 4096 x 4096 linear layer, sized so that every large buffer is a segment of its
own: `torchrun --nproc_per_node 2 fsdp2_streams.py`.

The weight is 4096 x 4096 fp32 = 64 MiB, its shard on each of 2 ranks 32 MiB; the batch is
8 x 4096, so activations stay in the small pool. Plain SGD keeps no optimizer state.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

WIDTH, BATCH = 4096, 8


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--adam", action="store_true")
    args = p.parse_args()
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH, bias=False, device="cuda")
                            for _ in range(args.layers)))
    if args.layers > 1:
        for layer in model:
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = (torch.optim.AdamW if args.adam else torch.optim.SGD)(model.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(BATCH, WIDTH, device="cuda")
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
