"""A functional collective's input dropped before the result is used, as compiled and DTensor
code leaves them: `torchrun --nproc_per_node 2 funcol_async.py`.

A 12 MiB fp32 tensor is all-reduced with torch.distributed._functional_collectives (the result
is an AsyncCollectiveTensor on a GPU), dropped, a 12 MiB buffer is allocated, then the result
is waited for.
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

MiB = 1 << 20


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    grads = torch.ones(3 * MiB, device="cuda")  # 12 MiB
    reduced = funcol.all_reduce(grads, "sum", dist.group.WORLD)
    del grads
    staging = torch.empty(3 * MiB, device="cuda")
    reduced = funcol.wait_tensor(reduced)
    print(f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    del staging, reduced
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
