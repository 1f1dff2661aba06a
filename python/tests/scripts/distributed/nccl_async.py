"""A collective whose tensor the script drops before it waits, the way overlapped code issues
one (`handle = dist.all_reduce(t, async_op=True)` ... `handle.wait()`):
`torchrun --nproc_per_node 2 nccl_async.py --op {all_reduce,isend} [--sync]`.

A 3 MiB fp32 tensor is reduced (or sent to the next rank), dropped, then an 18 MiB buffer is
allocated before the wait; after the wait the 3 MiB block's memory is needed again.
"""

import argparse
import os

import torch
import torch.distributed as dist

MiB = 1 << 20


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", choices=("all_reduce", "isend"), default="all_reduce")
    p.add_argument("--sync", action="store_true", help="async_op=False")
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")

    grads = torch.ones(3 * MiB // 4, device="cuda")
    if args.op == "all_reduce":
        handle = dist.all_reduce(grads, async_op=not args.sync)
    else:
        handle = dist.isend(grads, dst=(rank + 1) % world)
    del grads  # the script is done with it; the collective may not be
    staging = torch.empty(18 * MiB // 4, device="cuda")
    if handle is not None:
        handle.wait()
    print(f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    del staging
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
