"""Megatron's NCCL user-buffer allocator (`--use-nccl-ub`, DDP's and Megatron-FSDP's `nccl_ub`)
without building it.

megatron-core's `nccl_allocator` (0.16 to 0.19, the same code) compiles a C++ extension at first
use (`_build_nccl_allocator`: `load_inline` of a CUDAAllocator over NCCL's `ncclMemAlloc` and
`ncclMemFree`) and makes a `torch.cuda.MemPool` of it; DDP's and Megatron-FSDP's parameter and
gradient buffers are then made inside `use_mem_pool` (its `nccl_mem` context), and the pool is
registered with the data-parallel group's NCCL communicator. A trace builds no extension: the
allocator stands in as a named object, so the pool is memlens' simulated MemPool
(cuda/mem_pools.py: the buffers in a private pool of their own, reserved while it lives), and
the registration does nothing (patches/torch_distributed_groups.py). What ncclMemAlloc rounds
each segment up to (cuMem granules) is not modelled.
"""

from __future__ import annotations

from types import ModuleType


class NcclMemAllocator:
    """What `get_nccl_allocator()` returns: the pool's allocator, by name only."""

    memlens_name = "NCCL's ncclMemAlloc"


def nccl_allocator(plugin, mod: ModuleType) -> None:
    if not hasattr(mod, "_build_nccl_allocator"):
        return

    def _build_nccl_allocator() -> None:
        if mod._allocator is None:
            plugin.patcher.setattr(mod, "_allocator", NcclMemAllocator())
            plugin.note("--use-nccl-ub (NCCL user buffers): DDP's buffers are made in a "
                        "torch.cuda.MemPool of their own, as with NCCL's allocator, which is "
                        "not built in a trace (its rounding of each segment to cuMem granules "
                        "is not modelled)")

    plugin.patcher.setattr(mod, "_build_nccl_allocator", _build_nccl_allocator)


PATCHES = {
    "megatron.core.nccl_allocator": nccl_allocator,
}
