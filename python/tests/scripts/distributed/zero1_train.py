"""ZeRO-1 with PyTorch's ZeroRedundancyOptimizer over DDP:
`torchrun --nproc_per_node 4 zero1_train.py [--plain-adamw]`.

The model: 8 equal blocks Linear(256, 256) + ReLU and a head Linear(256, 10); parameters
8 x 65,792 + 2,570 = 528,906. Each rank keeps AdamW's state only for the parameters
ZeroRedundancyOptimizer assigns to it; --plain-adamw keeps it for all of them on every rank.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, BLOCKS, CLASSES, BATCH = 256, 8, 10, 32


def build_model() -> nn.Module:
    layers = []
    for _ in range(BLOCKS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plain-adamw", action="store_true", help="no ZeRO: AdamW on every rank")
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()

    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.manual_seed(1234)

    model = DDP(build_model().cuda(), device_ids=[local_rank], gradient_as_bucket_view=True)
    if args.plain_adamw:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                            lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(BATCH, WIDTH, device="cuda")
        y = torch.randint(0, CLASSES, (BATCH,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
