"""A model of PyTorch's CUDA caching allocator for one device (DeviceCachingAllocator in
c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.13), driven by (block id, bytes, stream) events.

What it follows, by the C++ function it imitates:
- malloc: round_size -> get_pool -> get_free_block (best fit, oversize rules) -> on a miss:
  garbage_collect_cached_blocks (only with a memory fraction below 1, as in PyTorch) ->
  alloc_block -> release_available_cached_blocks + alloc_block -> release_cached_blocks +
  alloc_block (counted in num_alloc_retries) -> OOM; then should_split / alloc_found_block.
- free: free_block merges free neighbours back and caches the block (inactive_split counts
  the free pieces of segments that cannot be released).
- expandable_segments: find_expandable_block / map_block / unmap_block on ExpandableSegment.
- streams: each free pool is searched by the requesting stream only (BlockPool keyed by stream,
  as get_free_block's search key), and recordStream / insert_events / process_events /
  synchronize_and_free_events defer the return of a block other streams used (see
  stream_events.py for when such a block is taken to be done with).
- CUDA graphs and MemPools: create_pool / begin_allocate_to_pool / end_allocate_to_pool /
  release_pool route a capture's allocations, or those under use_mem_pool, to a private pool
  (graph_pools.py); release_cached_blocks frees the default pools only when no capture is under
  way, and the pools nobody uses any more.
What it leaves out: a MemPool's use_on_oom and no_split, and a MemPool's own allocator's
rounding of its segments (NCCL's ncclMemAlloc: cuMem's granularity), active == allocated (a block
waiting for its events is not counted as active), cudaMalloc never fails for fragmentation of the driver's own address
space, and addresses come from a bump allocator rather than the driver.
"""

from __future__ import annotations

from typing import NamedTuple

from . import expandable_pool, release
from .blocks import Block, BlockPool
from .config import SIZE_MAX, AllocatorConfig, AllocatorConfigError
from .expandable import ExpandableSegment
from .graph_pools import DEFAULT_POOL, GraphPools
from .oom import ONE_EXABYTE, OomInfo, exabyte_oom, oom_message
from .sizes import MIN_BLOCK_SIZE, ROUND_LARGE, SMALL_SIZE, allocation_size, round_size
from .stats import ALLOCATED_BYTES, RESERVED_BYTES, SEGMENT, DeviceStats
from .stream_events import StreamEvents

_BASE_ADDRESS = 0x7F0000000000  # where the model's fake device pointers start


class AllocResult(NamedTuple):
    ok: bool
    block_id: int
    requested: int  # bytes asked for
    size: int  # bytes of the block handed out (0 for a zero-byte request or an OOM)
    address: int | None
    stream: int
    oom: OomInfo | None = None


class CachingAllocatorModel:
    def __init__(self, config: AllocatorConfig | None = None,
                 device_total_bytes: int = 80 * 2**30, *, device_index: int = 0,
                 capacity_bytes: int | None = None, memory_fraction: float | None = None,
                 record_history: bool = False) -> None:
        """`device_total_bytes`: what cudaMalloc may take in all (the card minus the CUDA
        context and anything else outside the allocator). `capacity_bytes`: the card's total
        memory (default: device_total_bytes), which a memory fraction and the OOM message
        refer to. `memory_fraction` plays torch.cuda.set_per_process_memory_fraction; by
        default the config's per_process_memory_fraction."""
        config = config or AllocatorConfig()
        if config.backend_cuda_malloc_async:
            raise AllocatorConfigError("backend:cudaMallocAsync hands memory to the driver's "
                                       "stream-ordered pool, which this model does not simulate")
        self.config = config
        self.device_total = device_total_bytes
        self.capacity = device_total_bytes if capacity_bytes is None else capacity_bytes
        self.device_index = device_index
        fraction = config.per_process_memory_fraction if memory_fraction is None \
            else memory_fraction
        # setMemoryFraction: a limit exists only below 1.0; garbage collection needs one.
        self.allowed_max = int(fraction * self.capacity) if fraction < 1.0 else None
        self._gc_enabled = self.allowed_max is not None and \
            config.garbage_collection_threshold > 0.0
        self._expandable = config.expandable_segments
        self._max_split = config.max_split_size
        self._roundup = any(d > 1 for d in config.roundup_power2_divisions)
        self.small_pool = BlockPool(is_small=True)
        self.large_pool = BlockPool(is_small=False)
        self.active: dict[int, Block] = {}
        self._empty_ids: set[int] = set()  # zero-byte requests: PyTorch returns nullptr
        self.stats = DeviceStats(self._max_split if self._max_split < SIZE_MAX else -1)
        self.reserved_bytes = 0  # total_allocated_memory: cudaMalloc'ed or mapped bytes
        # The same per stream: each segment belongs to the stream that made it (its pool's
        # key), so these sum to reserved_bytes. A stream whose segments were released stays, 0.
        self.reserved_by_stream: dict[int, int] = {}
        # The same per CUDA graph private pool (pool id -> bytes; the default pools are not
        # listed). A released pool stays, 0.
        self.reserved_by_pool: dict[int, int] = {}
        self.graphs = GraphPools()
        self._deferred: list[tuple[Block, set[int]]] = []  # freed in a capture with stream uses
        self.expandable_segments: list[ExpandableSegment] = []
        self._next_address = _BASE_ADDRESS
        self.history: list[dict] | None = [] if record_history else None
        self.events = StreamEvents()  # blocks freed while other streams may use them
        self.clock = 0  # one tick per malloc and free: when stream events were recorded

    # -- public API ------------------------------------------------------------------------
    @property
    def allocated_bytes(self) -> int:
        return self.stats.current[ALLOCATED_BYTES]

    def segment_count(self) -> int:
        """Segments as a memory snapshot lists them: cudaMalloc'ed segments plus each
        contiguous mapped range of an expandable segment."""
        return self.stats.current[SEGMENT] + \
            sum(seg.runs for seg in self.expandable_segments)

    def malloc(self, block_id: int, nbytes: int, stream: int = 0) -> AllocResult:
        if block_id in self.active or block_id in self._empty_ids:
            raise ValueError(f"block id {block_id} is already allocated")
        self.clock += 1
        if self.events and not self.graphs.captures:  # no event queries while capturing
            self._process_events()
        if nbytes == 0:
            self._empty_ids.add(block_id)
            return AllocResult(True, block_id, 0, 0, None, stream)
        if nbytes >= ONE_EXABYTE:
            return AllocResult(False, block_id, nbytes, 0, None, stream, exabyte_oom(
                nbytes, self.allocated_bytes, self.reserved_bytes, self.capacity,
                self.device_total - self.reserved_bytes))
        if self._roundup:
            size = round_size(nbytes, self.config)
        else:  # the same rule without the power-of-two lookup (the common, hot case)
            size = max(-(-nbytes // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE, MIN_BLOCK_SIZE)
        is_small = size <= SMALL_SIZE
        pool = (self.graphs.captures and self.graphs.pool_for(is_small, stream)) or \
            (self.small_pool if is_small else self.large_pool)
        block = self._get_free_block(pool, stream, size)
        if block is None:
            alloc_size = allocation_size(size, self.config)  # only needed on a miss
            if self._gc_enabled:
                self._garbage_collect()
            block = (self._alloc_block(pool, stream, size, alloc_size, False)
                     or (self._release_available_cached_blocks(pool, stream, size)
                         and self._alloc_block(pool, stream, size, alloc_size, False))
                     or (self._release_cached_blocks()
                         and self._alloc_block(pool, stream, size, alloc_size, True)))
            if not block:
                return AllocResult(False, block_id, nbytes, 0, None, stream,
                                   self._out_of_memory(nbytes, size, alloc_size, stream))
        block = self._alloc_found_block(block, block_id, size, nbytes, stream,
                                        self._should_split(block, size))
        self.active[block_id] = block
        return AllocResult(True, block_id, nbytes, block.size, block.addr, stream)

    def free(self, block_id: int) -> None:
        if block_id in self._empty_ids:
            self._empty_ids.discard(block_id)
            return
        block = self.active.pop(block_id)  # KeyError: never allocated, or freed twice
        self.clock += 1
        block.allocated = False
        self.stats.block_freed(block.pool.stat_type, block.size, block.requested)
        if self.history is not None:
            self._trace("free_requested", block.addr, block.requested, block.stream, block_id)
        if block.size >= self._max_split:
            self.stats.oversize_allocations.decrease(1)
        if block.stream_uses:
            uses, block.stream_uses = block.stream_uses, None
            if self.graphs.captures:  # events recorded in a capture wait for its end
                self._deferred.append((block, uses))
                block.event_count = len(uses)  # not free (nor mergeable) meanwhile
            else:
                self.events.insert(block, uses, self.clock)  # insert_events
        else:
            self._free_block(block)

    def record_stream(self, block_id: int, stream: int) -> None:
        """Tensor.record_stream(s) on the block: its free waits for the work queued on `s`.
        Uses on the allocation stream need no synchronisation and are ignored, as in PyTorch.
        An id the model does not hold (a zero-byte or refused allocation) is ignored too."""
        block = self.active.get(block_id)
        if block is None or stream == block.stream:
            return
        if block.stream_uses is None:
            block.stream_uses = set()
        block.stream_uses.add(stream)

    def stream_waited(self, waiter: int, stream: int, marker: int | None = None) -> None:
        """`waiter` (a stream id, or stream_events.HOST) waited for `stream`'s work up to the
        model's tick `marker` (default: now). Blocks it completes come back at the next
        malloc, as process_events runs there."""
        self.events.waited(waiter, stream, self.clock if marker is None else marker)

    def _process_events(self) -> None:
        # One at a time: a block whose events completed is free only once merged and cached,
        # so a neighbour completing in the same pass must not be taken for a cached one.
        for block in self.events.completed():
            self._free_block(block)

    # -- CUDA graphs -----------------------------------------------------------------------
    def create_pool(self, pool_id: int) -> None:
        """torch.cuda.MemPool(): private pool `pool_id`, held by the MemPool until release_pool."""
        self.graphs.create(pool_id)
        self.reserved_by_pool.setdefault(pool_id, 0)

    def begin_allocate_to_pool(self, pool_id: int, streams: frozenset[int] | set[int]) -> None:
        """CUDAGraph::capture_begin: allocations on `streams` come from private pool `pool_id`
        (created, or shared with the graphs already using it) until end_allocate_to_pool."""
        self.graphs.begin(pool_id, frozenset(streams))
        self.reserved_by_pool.setdefault(pool_id, 0)

    def join_capture(self, pool_id: int, stream: int) -> None:
        """`stream` waited on a stream capturing into `pool_id`: it captures into it too."""
        self.graphs.join(pool_id, stream)

    def end_allocate_to_pool(self, pool_id: int) -> None:
        """CUDAGraph::capture_end. With no capture left, the end-of-use events of blocks freed
        during captures are recorded now (needs_events_deferred_until_no_capture)."""
        self.graphs.end(pool_id)
        if not self.graphs.captures and self._deferred:
            deferred, self._deferred = self._deferred, []
            for block, uses in deferred:
                block.event_count = 0
                self.events.insert(block, uses, self.clock)

    def release_pool(self, pool_id: int) -> None:
        """CUDAGraph::reset or the graph's destruction, use_mem_pool's exit or the MemPool's
        destruction: one user fewer; at none, the pool's
        unused segments go back to the driver at the next release_cached_blocks."""
        self.graphs.release(pool_id)

    def deferred_blocks(self) -> list[Block]:
        """Blocks freed during a capture that wait for its end to record their events."""
        return [block for block, _ in self._deferred]

    def empty_cache(self, pool_id: int = DEFAULT_POOL) -> None:
        """torch.cuda.empty_cache(): release_cached_blocks; with a pool id (a MemPool's
        destruction: emptyCache(id)), only that pool's, if nobody uses it any more."""
        self._release_cached_blocks(pool_id)

    def memory_stats(self) -> dict[str, int]:
        return self.stats.as_dict()

    # -- finding and carving blocks --------------------------------------------------------
    def _get_free_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        if self._gc_enabled:
            pool.get_free_blocks_call_count += 1  # the clock that ages cached blocks
        position, block = pool.best_fit(stream, size)
        if block is None:
            return None
        if block.segment is not None:
            # Best fit counts the unmapped space right after a block as part of it.
            following = pool.at(stream, position + 1)
            while block.segment is not None and following is not None and \
                    _expandable_size(following) < _expandable_size(block):
                position += 1
                block, following = following, pool.at(stream, position + 1)
        if size < self._max_split <= block.size:
            return None  # never hand an oversize block to a request that could split it
        if size >= self._max_split and \
                block.size >= size + self.config.max_non_split_rounding_size:
            return None  # an oversize block may serve only requests within the rounding size
        pool.remove(block)
        return block

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.is_small or self._expandable:
            return remaining >= MIN_BLOCK_SIZE
        return size < self._max_split and remaining > SMALL_SIZE

    def _alloc_found_block(self, block: Block, block_id: int, size: int, requested: int,
                           stream: int, split: bool) -> Block:
        pool = block.pool
        pool_type = pool.stat_type
        stats = self.stats
        already_split = block.is_split()
        if split:
            remaining = block
            block = Block(size, remaining.addr, stream, pool, remaining.segment)
            block.splice(remaining.prev, remaining)
            remaining.addr += size
            remaining.size -= size
            pool.insert(remaining)
            if block.segment is None:
                if already_split:  # a free piece shrinks by what is handed out
                    stats.inactive_split_change(pool_type, 0, -size)
                else:  # an unsplit block leaves a free piece behind
                    stats.inactive_split_change(pool_type, 1, remaining.size)
        elif already_split and block.segment is None:  # a whole free piece becomes active
            stats.inactive_split_change(pool_type, -1, -block.size)
        block.allocated = True
        block.requested = requested
        block.block_id = block_id
        stats.block_allocated(pool_type, block.size, requested)
        if block.size >= self._max_split:
            stats.oversize_allocations.increase(1)
        if self.history is not None:
            self._trace("alloc", block.addr, requested, stream, block_id)
        return block

    def _free_block(self, block: Block) -> None:
        """Merge with free neighbours and cache the result."""
        pool = block.pool
        net_blocks = net_bytes = 0
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                subsumed = self._try_merge(block, neighbour)
                if subsumed:
                    net_blocks -= 1
                    net_bytes -= subsumed
        pool.insert(block)
        if block.is_split():
            net_blocks += 1
            net_bytes += block.size
        if block.segment is None and (net_blocks or net_bytes):
            # PyTorch leaves expandable segments out of inactive_split.
            self.stats.inactive_split_change(pool.stat_type, net_blocks, net_bytes)
        if self.history is not None:
            self._trace("free_completed", block.addr, block.requested, block.stream,
                        block.block_id)
        block.block_id = None

    def _try_merge(self, dst: Block, src: Block | None) -> int:
        """try_merge_blocks: absorb a free neighbour of the same mapping state."""
        if src is None or src.allocated or src.event_count or src.mapped != dst.mapped:
            return 0  # (a block waiting for other streams' events is not free yet)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        if src.mapped:
            dst.pool.remove(src)
        else:
            dst.pool.remove_unmapped(src)
        dst.size += src.size
        return src.size

    # -- getting and giving back device memory ---------------------------------------------
    def _alloc_block(self, pool: BlockPool, stream: int, size: int, alloc_size: int,
                     is_retry: bool) -> Block | None:
        if is_retry:
            self.stats.num_alloc_retries += 1
        if self.allowed_max is not None and self.reserved_bytes + alloc_size > self.allowed_max:
            return None
        if self._expandable:
            return expandable_pool.allocate_block(self, pool, stream, size)
        if self.reserved_bytes + alloc_size > self.device_total:
            return None  # cudaMalloc: cudaErrorMemoryAllocation
        pool_type = pool.stat_type
        block = Block(alloc_size, self._reserve_addresses(alloc_size, ROUND_LARGE), stream, pool)
        self._reserve(pool, stream, alloc_size)
        if pool.owner != DEFAULT_POOL:
            self.graphs.pools[pool.owner].cuda_malloc_count += 1
        self.stats.increase(SEGMENT, pool_type, 1)
        self.stats.increase(RESERVED_BYTES, pool_type, alloc_size)
        if alloc_size >= self._max_split:
            self.stats.oversize_segments.increase(1)
        self.stats.num_device_alloc += 1
        self._trace("segment_alloc", block.addr, alloc_size, stream)
        return block

    def _release_block(self, block: Block) -> None:
        """cudaFree a whole cached segment."""
        assert block.segment is None and not block.is_split(), "releasing part of a segment"
        pool_type = block.pool.stat_type
        self.stats.num_device_free += 1
        self._trace("segment_free", block.addr, block.size, block.stream)
        self._reserve(block.pool, block.stream, -block.size)
        if block.pool.owner != DEFAULT_POOL:
            self.graphs.pools[block.pool.owner].cuda_malloc_count -= 1
        self.stats.decrease(SEGMENT, pool_type, 1)
        self.stats.decrease(RESERVED_BYTES, pool_type, block.size)
        if block.size >= self._max_split:
            self.stats.oversize_segments.decrease(1)
        block.pool.remove(block)

    def _release_available_cached_blocks(self, pool: BlockPool, stream: int, size: int) -> bool:
        return release.release_available_cached_blocks(self, pool, stream, size)

    def _release_cached_blocks(self, only: int = DEFAULT_POOL) -> bool:
        """Free every cached segment no block is using; unmap free pages of expandable ones.
        First synchronize_and_free_events: blocks waiting for other streams come back. While a
        capture is under way only the pools nobody uses any more are freed (as in PyTorch);
        `only`, a pool id: that pool alone, if nobody uses it."""
        pools: list[BlockPool] = []
        if not self.graphs.captures and only == DEFAULT_POOL:
            for block in self.events.drain():  # one at a time, as above
                self._free_block(block)
            pools += [self.large_pool, self.small_pool]
        for pool_id, private in list(self.graphs.freeable.items()):
            if only in (DEFAULT_POOL, pool_id):
                pools += [private.small, private.large]
        for pool in pools:
            to_unmap = []
            for block in list(pool.blocks()):
                if block.segment is not None:
                    to_unmap.append(block)
                elif not block.is_split():
                    self._release_block(block)
            for block in to_unmap:
                expandable_pool.unmap_block(self, block)
                if not block.mapped and not block.is_split():
                    block.pool.remove_unmapped(block)  # the whole range is free: drop it
                    self.expandable_segments.remove(block.segment)
        for pool_id in [p for p in self.graphs.freeable if only in (DEFAULT_POOL, p)]:
            # Nothing of it left (cudaMalloc_count 0; with expandable segments: nothing mapped):
            # the pool is gone.
            if self.reserved_by_pool[pool_id] == 0:
                del self.graphs.freeable[pool_id], self.graphs.pools[pool_id]
        return True

    def _garbage_collect(self) -> None:
        release.garbage_collect_cached_blocks(self)

    def _out_of_memory(self, nbytes: int, size: int, alloc_size: int, stream: int) -> OomInfo:
        self.stats.num_ooms += 1
        free = self.device_total - self.reserved_bytes
        self._trace("oom", free, size, stream)
        allocated = self.allocated_bytes
        message = oom_message(alloc_size, self.device_index, self.capacity, free,
                              allocated, self.reserved_bytes, self.allowed_max)
        return OomInfo(nbytes, size, alloc_size, allocated, self.reserved_bytes,
                       self.capacity, free, message)

    # -- bookkeeping -----------------------------------------------------------------------
    def _reserve(self, pool: BlockPool, stream: int, nbytes: int) -> None:
        """`nbytes` more (or, negative, fewer) bytes from the driver for `stream`'s pool."""
        self.reserved_bytes += nbytes
        self.reserved_by_stream[stream] = self.reserved_by_stream.get(stream, 0) + nbytes
        if pool.owner != DEFAULT_POOL:
            self.reserved_by_pool[pool.owner] += nbytes

    def _reserve_addresses(self, size: int, alignment: int) -> int:
        address = -(-self._next_address // alignment) * alignment
        self._next_address = address + size
        return address

    # -- what expandable_pool.py and release.py ask of the model (a SegmentHost) ----------------
    @property
    def max_split(self) -> int:
        return self._max_split

    def release_block(self, block: Block) -> None:
        self._release_block(block)

    def reserve_addresses(self, size: int, alignment: int) -> int:
        return self._reserve_addresses(size, alignment)

    def merge_neighbours(self, block: Block) -> None:
        self._try_merge(block, block.prev)
        self._try_merge(block, block.next)

    def pages_mapped(self, block: Block, nbytes: int) -> None:
        """`nbytes` of pages mapped at `block` (after it merged with its neighbours)."""
        self._reserve(block.pool, block.stream, nbytes)
        self.stats.increase(RESERVED_BYTES, block.pool.stat_type, nbytes)
        self.stats.num_device_alloc += 1
        self._trace("segment_map", block.addr, nbytes, block.stream)

    def pages_unmapped(self, block: Block, start: int, nbytes: int) -> None:
        self._reserve(block.pool, block.stream, -nbytes)
        self.stats.decrease(RESERVED_BYTES, block.pool.stat_type, nbytes)
        self.stats.num_device_free += 1
        self._trace("segment_unmap", start, nbytes, block.stream)

    def _trace(self, action: str, addr: int, size: int, stream: int,
               block_id: int | None = None) -> None:
        if self.history is not None:
            self.history.append({"action": action, "addr": addr, "size": size,
                                 "stream": stream, "block_id": block_id, "frames": []})


def _expandable_size(block: Block) -> int:
    following = block.next
    return block.size + (following.size if following is not None and not following.mapped
                         else 0)

