"""An FSDP2 (`fully_shard`) training script with a known parameter count, launched as
`torchrun --nproc_per_node 8 fsdp2_train.py [--no-reshard] [--bf16] [--offload] [--vocab N]
[--checkpoint DIR]`.

The model: an embedding and an output head of 1,003 x 128 (1,003 rows do not split evenly over
8 ranks, so FSDP pads them) and two pre-norm MLP blocks of width 128 -> 512 -> 128.
Parameters: 2 x 128,384 + 2 x 131,968 = 520,704.

`build`, `batch` and `step` are imported by the FSDPMemTracker runner of the tests, so that
both tools measure the same step.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

VOCAB, HIDDEN, LAYERS, BATCH, SEQ = 1003, 128, 2, 4, 64


class Block(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.norm = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Model(nn.Module):
    def __init__(self, vocab=VOCAB):
        super().__init__()
        self.emb = nn.Embedding(vocab, HIDDEN)
        self.blocks = nn.ModuleList(Block(HIDDEN) for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--no-reshard", action="store_true", help="reshard_after_forward=False")
    p.add_argument("--bf16", action="store_true", help="MixedPrecisionPolicy(param_dtype=bf16)")
    p.add_argument("--offload", action="store_true", help="CPUOffloadPolicy()")
    p.add_argument("--vocab", type=int, default=VOCAB, help="rows of the embedding and head")
    p.add_argument("--fail-on-rank", type=int, default=None, help="raise on this rank")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--checkpoint", default=None,
                   help="save the sharded model and optimizer with torch.distributed.checkpoint's "
                        "async_save to this folder before training (as OLMo-core does at step 0)")
    return p.parse_args(argv)


def build(args, device, mesh):
    with torch.device(device):
        model = Model(args.vocab)
    kw = {"mesh": mesh, "reshard_after_forward": not args.no_reshard}
    if args.bf16:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                               reduce_dtype=torch.float32)
    if args.offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for block in model.blocks:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer


def batch(device, vocab=VOCAB):
    x = torch.randint(0, vocab, (BATCH, SEQ), device=device)
    y = torch.randint(0, vocab, (BATCH, SEQ), device=device)
    return x, y


def step(model, optimizer, x, y):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


def save(model, optimizer, folder):
    state = {"model": model.state_dict(),
             "optim": get_optimizer_state_dict(model, optimizer)}  # makes AdamW's state
    dcp.async_save(state, checkpoint_id=folder).result()


def main():
    args = parse()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    if cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    if args.fail_on_rank == dist.get_rank():
        raise RuntimeError(f"rank {dist.get_rank()} has no data shard")
    model, optimizer = build(args, device, mesh)
    if args.checkpoint:
        save(model, optimizer, args.checkpoint)
    for _ in range(args.steps):
        x, y = batch(device, args.vocab)
        step(model, optimizer, x, y)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
