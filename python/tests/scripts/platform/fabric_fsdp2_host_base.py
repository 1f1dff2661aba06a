"""A frozen base model whose FSDP2 shards stay in host memory, as litgpt's LoRA fine-tuning
loads its checkpoint with Lightning Fabric's ModelParallelStrategy (`cpu_offload=True`: each
full weight is sharded with `distribute_tensor`, the shard moved to the CPU, and loaded with
`load_state_dict(assign=True)`): `python fabric_fsdp2_host_base.py`, 8 GPUs. The base is
two bias-free 1024 x 1024 linears, frozen; the adapter a trainable 1024 -> 16 -> 1024 pair on
the GPU; AdamW over the adapter, 2 steps. Each forward gathers the host shards into the GPU's
all-gather buffer (FSDP2's `all_gather_copy_in`, the host-to-device copy of its CUDA kernel)."""

import lightning as L
import torch
from lightning.fabric.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor


class Adapted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Sequential(nn.Linear(1024, 1024, bias=False), nn.Linear(1024, 1024, bias=False))
        self.down = nn.Linear(1024, 16, bias=False)
        self.up = nn.Linear(16, 1024, bias=False)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


def parallelize(model: nn.Module, device_mesh) -> nn.Module:
    mesh = device_mesh["data_parallel"]
    for layer in model.base:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def load_base_to_host(model: nn.Module, full: dict, device) -> None:
    sharded = model.state_dict()
    shards = {}
    for name, tensor in full.items():
        like = sharded[name]
        shard = distribute_tensor(tensor.to(device), like.device_mesh, like.placements)
        shards[name] = nn.Parameter(shard.cpu(), requires_grad=False)
    model.load_state_dict(shards, strict=False, assign=True)


def main() -> None:
    strategy = ModelParallelStrategy(parallelize_fn=parallelize, data_parallel_size=8,
                                     tensor_parallel_size=1)
    fabric = L.Fabric(accelerator="cuda", devices=8, strategy=strategy)
    fabric.launch()
    with fabric.init_module(empty_init=True):
        model = Adapted()
    model.base.requires_grad_(False)
    model = fabric.setup_module(model)
    optimizer = fabric.setup_optimizers(
        torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3))
    checkpoint = {f"base.{i}.weight": torch.randn(1024, 1024) for i in range(2)}
    load_base_to_host(model, checkpoint, fabric.device)
    for _ in range(2):
        x = torch.randn(32, 1024, device=fabric.device)
        loss = model(x).square().mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
