"""FSDP2 with each block compiled on its own, in torchtitan's order: `torch.compile` per block
(fullgraph=True), then `fully_shard` per block and on the whole model. Launched as
`torchrun --nproc_per_node 2 fsdp2_compiled.py`.

The model: four residual MLP blocks of width 256 -> 1024 -> 256 (fp32, no bias); a batch of
8 x 64 tokens."""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

WIDTH, LAYERS, BATCH, SEQ = 256, 4, 8, 64


class Block(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.fc1 = nn.Linear(h, 4 * h, bias=False)
        self.fc2 = nn.Linear(4 * h, h, bias=False)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict({str(i): Block(WIDTH) for i in range(LAYERS)})

    def forward(self, x):
        for layer in self.layers.values():
            x = layer(x)
        return x


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),), mesh_dim_names=("dp",))
    with torch.device("cuda"):
        model = Model()
    for name, block in model.layers.named_children():
        model.layers.register_module(name, torch.compile(block, fullgraph=True))
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(BATCH, SEQ, WIDTH, device="cuda")
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
