"""2-D bring-up with `init_device_mesh` and no `init_process_group` (the mesh starts the default
group itself): `torchrun --nproc_per_node 4 device_mesh_tp_bringup.py --tp 2`.

A token MLP: embedding 1,024 x 256, two pre-norm blocks (LayerNorm 256, w1 256 -> 1,024,
GELU, w2 1,024 -> 256), final LayerNorm, head 256 -> 1,024 without bias. In each block w1 is
column-parallel and w2 row-parallel over `tp`; then every block and the root are
`fully_shard`-ed over `dp`.
"""

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

VOCAB, DIM, FFN, LAYERS, BATCH, SEQ = 1024, 256, 1024, 2, 4, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.w1 = nn.Linear(DIM, FFN)
        self.w2 = nn.Linear(FFN, DIM)

    def forward(self, x):
        return x + self.w2(F.gelu(self.w1(self.norm(x))))


class TokenMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    world = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    rank = dist.get_rank()
    if rank == 0:
        print(f"world {dist.get_world_size()}: dp {dp_mesh.size()} x tp {tp_mesh.size()}")
    torch.manual_seed(dp_mesh.get_local_rank())  # the same data within a TP group

    model = TokenMLP().cuda()
    for block in model.blocks:
        parallelize_module(block, tp_mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    dist.barrier()

    for step in range(args.steps):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device="cuda")
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        reported = loss.detach().clone()
        dist.all_reduce(reported, op=dist.ReduceOp.AVG, group=dp_mesh.get_group())
        if rank == 0:
            print(f"step {step} loss {reported.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
