"""Process-group bring-up the ways training scripts write it, followed by a DDP step:
`torchrun --nproc_per_node 2 nccl_bringup.py --init {env,tcp,file,store} --port P`.

- env: MASTER_ADDR/MASTER_PORT set by the script (as tutorials do), `init_method="env://"`
- tcp: `--dist-url tcp://127.0.0.1:P` with world size and rank passed explicitly
- file: `init_method="file:///tmp/..."`
- store: a TCPStore built by the script and passed as `store=`

On a real job each of these meets the other ranks at 127.0.0.1:P. Then the script checks that
NCCL is there, sets the group timeout as torchtitan does after its first step, makes a group
with NCCL options, trains a Linear(1024, 1024) under DDP with SGD and momentum, all-reduces
its loss as a metric over that group and reads it, and tears down.
"""

import argparse
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def init(args, world: int, rank: int) -> None:
    """Each waits for the other ranks (30 minutes by default) before it returns."""
    if args.init == "env":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
        dist.init_process_group("nccl", init_method="env://")
    elif args.init == "tcp":
        dist.init_process_group(backend="nccl", init_method=f"tcp://127.0.0.1:{args.port}",
                                world_size=world, rank=rank)
    elif args.init == "file":
        path = os.path.join(tempfile.gettempdir(), f"nccl_bringup_{args.port}")
        dist.init_process_group("nccl", init_method=f"file://{path}", world_size=world,
                                rank=rank)
    else:
        store = dist.TCPStore("127.0.0.1", args.port, world, is_master=rank == 0,
                              timeout=timedelta(minutes=30))
        store.set(f"rank{rank}", "up")
        dist.init_process_group("nccl", store=store, world_size=world, rank=rank)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", choices=("env", "tcp", "file", "store"), default="env")
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])

    if not (dist.is_available() and dist.is_nccl_available()):
        raise SystemExit("this job needs NCCL")
    torch.cuda.set_device(local_rank)
    init(args, world, rank)
    assert (dist.get_rank(), dist.get_world_size()) == (rank, world)
    assert dist.get_backend() == "nccl", dist.get_backend()  # picks the GPU code paths
    # An NCCL group's device, where torch.distributed.checkpoint broadcasts a full state dict
    # loaded on rank 0 (set_model_state_dict(..., broadcast_from_rank0=True)).
    assert c10d._get_pg_default_device().type == "cuda", c10d._get_pg_default_device()
    c10d._set_pg_timeout(timedelta(seconds=120), dist.group.WORLD)
    # A high-priority NCCL communicator for metrics, as Megatron configures its groups.
    options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    metrics_group = dist.new_group(ranks=list(range(world)), pg_options=options)
    dist.barrier()

    model = DDP(nn.Linear(1024, 1024).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        x = torch.randn(16, 1024, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        metric = loss.detach().clone()
        dist.all_reduce(metric, op=dist.ReduceOp.SUM, group=metrics_group)
        if rank == 0:
            print(f"step {step} mean loss {metric.item() / world:.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
