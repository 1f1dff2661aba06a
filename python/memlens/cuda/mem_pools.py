"""User memory pools on the simulated GPU: ``torch.cuda.MemPool`` and ``use_mem_pool``.

PyTorch's MemPool (c10/cuda/CUDACachingAllocator.cpp, torch/cuda/memory.py; a C++ class a CPU
build lacks) is a private pool of the caching allocator, like a CUDA graph's: ``MemPool()``
creates it (createOrIncrefPool) and holds it until the MemPool is destroyed; ``use_mem_pool``
routes the current thread's allocations, on any stream, to it until the context exits
(beginAllocateCurrentThreadToPool / endAllocateToPool / releasePool). What is freed in it goes
back to it: its segments stay reserved, for it alone, while the MemPool lives. Libraries make
one for buffers a communication library registers (Megatron's NCCL user buffers,
``--use-nccl-ub``, with NCCL's ``ncclMemAlloc`` as the pool's allocator).

Here ``FakeMemPool`` stands in for the class and the pool events go to the allocator model
(allocator/graph_pools.py) through the graphs' table. Inside a capture, torch 2.14's
``use_mem_pool`` has the capturing graph keep the pool (graphs.FakeCUDAGraph._retain_pool).
Not modelled: allocations of other threads inside ``use_mem_pool`` (autograd's) are routed
too; ``use_on_oom`` and ``no_split``; the pool's own allocator's rounding of its segments
(ncclMemAlloc maps cuMem granules).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch

from ..allocator.graph_pools import EVERY_STREAM
from ..patches.patcher import Patcher, check_tested
from . import streams
from .graphs import GRAPHS, _user_place

_USES: dict[int, int] = {}  # pool id -> use_mem_pool contexts under way


class FakeMemPool:
    """Stand-in for ``torch.cuda.MemPool`` (see the module's docstring)."""

    def __init__(self, allocator: Any = None, use_on_oom: bool = False,
                 no_split: bool = False) -> None:
        self._pool = GRAPHS.new_pool_id()
        self._device = streams.STREAMS.devices().current()
        self._allocator = allocator
        GRAPHS.event(self._device, "pool_create", self._pool)
        made_by = getattr(allocator, "memlens_name", None) or (
            "its own allocator" if allocator is not None else None)
        where = _user_place(sys._getframe(1))
        GRAPHS.name(self._pool, "MemPool" + (f" ({made_by})" if made_by else "")
                    + (f" made at {where}" if where else ""))
        # The pool is let go with the MemPool (~MemPool: releasePool); not by a MemPool of an
        # earlier trace of this process, collected during a later one.
        weakref.finalize(self, _release, self._device, self._pool, GRAPHS.generation)

    @property
    def id(self) -> tuple[int, int]:
        return (self._pool, 0)

    @property
    def allocator(self) -> Any:
        return self._allocator

    def use_count(self) -> int:
        """This MemPool and the use_mem_pool contexts under way (not the graphs keeping it)."""
        return 1 + _USES.get(self._pool, 0)

    def snapshot(self, include_traces: bool = True) -> list[dict]:
        """The pool's segments, as ``torch.cuda.memory_snapshot(pool.id)`` lists them."""
        return GRAPHS.segments(self._device, self._pool)


def _release(device: int, pool: int, generation: int) -> None:
    """~MemPool: releasePool, then emptyCache(id): the pool's unused segments go at once."""
    if GRAPHS.bound and GRAPHS.generation == generation:
        GRAPHS.event(device, "pool_release", pool)
        GRAPHS.event(device, "empty_cache", pool)


def _pool_of(mempool_id) -> int:
    pool = int(mempool_id[0]) if isinstance(mempool_id, tuple) else int(mempool_id)
    if pool <= 0:
        raise RuntimeError(f"memlens: {mempool_id!r} is not a pool id a MemPool or a CUDA graph "
                           "of this trace made")
    return pool


def begin_allocate_current_thread_to_pool(device_index: int, mempool_id) -> None:
    """use_mem_pool's entry: one user more, and every allocation of the thread to the pool."""
    pool = _pool_of(mempool_id)
    _USES[pool] = _USES.get(pool, 0) + 1
    GRAPHS.event(int(device_index), "pool_begin", pool, EVERY_STREAM)


def end_allocate_to_pool(device_index: int, mempool_id) -> None:
    GRAPHS.event(int(device_index), "pool_end", _pool_of(mempool_id))


def release_pool(device_index: int, mempool_id) -> None:
    """use_mem_pool's exit: one user fewer (the MemPool still holds the pool)."""
    pool = _pool_of(mempool_id)
    _USES[pool] = max(0, _USES.get(pool, 0) - 1)
    GRAPHS.event(int(device_index), "pool_release", pool)


def install(patches: Patcher, cuda_modules: list[Any]) -> None:
    """Put the fake MemPool in place (undone with `patches`); its events go where the graphs'
    do (graphs.install binds that first)."""
    check_tested("cuda_graphs", torch.__version__)
    import torch.cuda.memory as torch_memory

    patches.set_everywhere(cuda_modules, "MemPool", FakeMemPool)
    # What use_mem_pool calls by torch/cuda/memory.py's own global names.
    for name, value in {"_cuda_beginAllocateCurrentThreadToPool":
                        begin_allocate_current_thread_to_pool,
                        "_cuda_endAllocateToPool": end_allocate_to_pool,
                        "_cuda_releasePool": release_pool}.items():
        patches.setattr(torch_memory, name, value)
