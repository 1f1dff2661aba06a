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

# A MemPool used inside a CUDA graph's capture (torch 2.14's use_mem_pool asks for the capturing
# graph and has it keep the pool): the 2 MiB made there come from the MemPool's pool, whose
# segment the graph keeps after the MemPool is gone, until the graph is reset.
captured_pool = torch.cuda.MemPool()
side = torch.cuda.Stream()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph, stream=side):
    with torch.cuda.use_mem_pool(captured_pool):
        kept = torch.zeros(2 * MiB // 4, device="cuda")
mark("captured_in_pool")
del captured_pool, kept
torch.cuda.empty_cache()
mark("mem_pool_gone_graph_keeps_it")
graph.reset()
torch.cuda.empty_cache()
mark("graph_reset")
