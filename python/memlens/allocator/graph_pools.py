"""Private memory pools (PrivatePool in c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.13), as
the caching allocator model keeps them: CUDA graphs' and those of torch.cuda.MemPool.

- beginAllocateToPool(id, filter) (CUDAGraph::capture_begin): create the pool, or add one
  user to an existing one (create_or_incref_pool; `pool=` shares it), and route the
  allocations of the streams the filter accepts to it (get_pool, captures searched newest
  first) until endAllocateToPool (capture_end). Here the filter is a set of stream ids: the
  capturing stream, and the streams that joined the capture (a stream that waits on a
  capturing one inside the capture is capturing too, into the same graph).
- A pool has its own small and large BlockPools: its segments are cudaMalloc'ed for it, its
  freed blocks go back to it (free_block inserts into block->pool), and no allocation outside
  a capture to it ever searches it, so after the capture its free space serves nobody else.
- releasePool(id) (CUDAGraph::reset, the graph's destruction) drops one user; at 0 the pool
  becomes freeable: its unsplit cached segments are cudaFree'd at the next release_cached_blocks
  (empty_cache, or the retry before an OOM), and the pool itself is erased once no segment of
  it is left (cudaMalloc_count 0). Until then a live output tensor keeps its segment.
- A MemPool is such a pool made by the MemPool's constructor (createOrIncrefPool), which holds
  it until the MemPool is destroyed; `use_mem_pool` begins allocating to it with a filter
  that accepts the current thread's allocations on any stream (EVERY_STREAM here).
"""

from __future__ import annotations

from .blocks import BlockPool

DEFAULT_POOL = 0  # MempoolId {0, 0}: the allocator's own small and large pools
EVERY_STREAM = -1  # use_mem_pool's filter: the thread's allocations, whatever their stream


class PrivatePool:
    def __init__(self, pool_id: int) -> None:
        self.id = pool_id
        self.use_count = 1  # graphs capturing or captured into it that have not been reset
        self.cuda_malloc_count = 0  # its segments still held from the driver
        self.small = BlockPool(is_small=True, owner=pool_id)
        self.large = BlockPool(is_small=False, owner=pool_id)


class GraphPools:
    """The model's private pools and the captures under way."""

    def __init__(self) -> None:
        self.pools: dict[int, PrivatePool] = {}
        self.freeable: dict[int, PrivatePool] = {}  # use_count reached 0
        self.captures: list[tuple[int, frozenset[int]]] = []  # (pool id, capturing streams)

    def create(self, pool_id: int) -> None:
        """createOrIncrefPool: the pool made, or one user more (a MemPool's constructor, a
        graph keeping a MemPool's pool; nothing is allocated to it until a begin)."""
        if pool_id == DEFAULT_POOL:
            raise ValueError("pool id 0 is the default pool")
        pool = self.pools.get(pool_id)
        if pool is None:
            self.pools[pool_id] = PrivatePool(pool_id)
        else:
            assert pool.use_count > 0, f"pool {pool_id} was released; it cannot be shared"
            pool.use_count += 1

    def begin(self, pool_id: int, streams: frozenset[int]) -> None:
        self.create(pool_id)
        if any(pid == pool_id for pid, _ in self.captures):
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        self.captures.append((pool_id, frozenset(streams)))

    def join(self, pool_id: int, stream: int) -> None:
        """`stream` joined the capture into `pool_id`: its allocations go to the pool too."""
        for i, (pid, streams) in enumerate(self.captures):
            if pid == pool_id:
                self.captures[i] = (pid, streams | {stream})
                return
        raise RuntimeError(f"no capture into pool {pool_id} is under way")

    def end(self, pool_id: int) -> None:
        for i, (pid, _) in enumerate(self.captures):
            if pid == pool_id:
                del self.captures[i]
                return
        raise RuntimeError("endAllocatePool: not currently recording to mempool_id")

    def release(self, pool_id: int) -> None:
        pool = self.pools[pool_id]
        pool.use_count -= 1
        assert pool.use_count >= 0
        if pool.use_count == 0:
            self.freeable[pool_id] = pool

    def pool_for(self, is_small: bool, stream: int) -> BlockPool | None:
        """get_pool: the pool of the newest capture whose filter accepts `stream`, if any."""
        for pool_id, streams in reversed(self.captures):
            if stream in streams or EVERY_STREAM in streams:
                pool = self.pools[pool_id]
                return pool.small if is_small else pool.large
        return None
