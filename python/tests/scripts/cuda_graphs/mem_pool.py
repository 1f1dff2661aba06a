"""torch.cuda.MemPool as libraries use it for buffers a communication library registers
(Megatron's NCCL user buffers): tensors made inside `use_mem_pool` live in a pool of their own,
which nothing outside it reuses and which stays reserved while the MemPool lives. Prints the
caching allocator's counters at each step (`MARK name allocated reserved`) and the pool's
segments. fp32: 262,144 values are 1 MiB."""

import torch

MiB = 1 << 20


def mark(name):
    print("MARK", name, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), flush=True)


pool = torch.cuda.MemPool()
mark("made")
with torch.cuda.use_mem_pool(pool):
    bucket = torch.zeros(3 * MiB // 4, device="cuda")
mark("in_pool")
print("POOL_SEGMENTS", [segment["total_size"] for segment in pool.snapshot()], flush=True)
x = torch.zeros(MiB // 4, device="cuda")
mark("outside")
del bucket
torch.cuda.empty_cache()
mark("freed_and_emptied")
with torch.cuda.use_mem_pool(pool):
    again = torch.zeros(2 * MiB // 4, device="cuda")
mark("reused")
y = torch.zeros(3 * MiB // 4, device="cuda")
mark("outside_again")
del again
del pool
mark("pool_deleted")
