"""Pinned host memory as GPU training code takes it, traced as rank 0 of 2:
`torch.empty(..., pin_memory=True)`, `t.pin_memory()`, a DataLoader with `pin_memory=True`
(in the traced thread, and in its own pinning thread with a worker), a fake host tensor pinned
(too large to make for real), and DDP with `find_unused_parameters=True`, whose reducer keeps a
pinned map of used parameters. Prints what `is_pinned()` answers, one `PINNED name value` line
each."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def report(name: str, value) -> None:
    print(f"PINNED {name} {value}", flush=True)


def main() -> None:
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)

    staging = torch.empty(256, 1024, pin_memory=True)          # 1 MiB, real, pinned
    host = torch.ones(512, 1024)                                # 2 MiB, real
    pinned_copy = host.pin_memory()                             # 2 MiB more, pinned
    big = torch.empty(20 * 1024 * 1024, pin_memory=True)        # 80 MiB: fake, pinned
    report("staging", staging.is_pinned())
    report("host", host.is_pinned())
    report("pinned_copy", pinned_copy.is_pinned())
    report("big", big.is_pinned())

    data = TensorDataset(torch.randn(64, 1024), torch.randint(0, 10, (64,)))
    loader = DataLoader(data, batch_size=16, pin_memory=True)
    x, y = next(iter(loader))
    report("loader", x.is_pinned() and y.is_pinned())
    threaded = DataLoader(data, batch_size=16, pin_memory=True, num_workers=1)
    tx, _ = next(iter(threaded))
    report("loader_thread", tx.is_pinned())

    # The second layer is never used: DDP must be told, and keeps a pinned map of used ones.
    model = nn.ModuleDict({"used": nn.Linear(1024, 10), "unused": nn.Linear(10, 10)}).cuda()
    ddp = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(2):
        out = ddp.module["used"](x.cuda(non_blocking=True))
        loss = nn.functional.cross_entropy(out, y.cuda(non_blocking=True))
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
