"""Blocks freed while other streams may still use them (`Tensor.record_stream`), and when they
come back to their pool.

PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.13):
- recordStream(block, s) adds `s` to `block->stream_uses`, unless `s` is the block's own
  allocation stream ("uses on the allocation stream ... don't require any special
  synchronization").
- free(block) with stream uses: allocated bytes drop at once, but instead of free_block the
  block goes to insert_events: one CUDA event recorded on each used stream, `event_count`
  counting them, kept in `cuda_events[stream]` in order.
- process_events, at the start of every malloc: per stream, pop the events that have completed
  (cudaEventQuery), stopping at the first that has not; a block whose `event_count` reaches 0
  goes through free_block (merged, back in its pool, reusable by its own stream).
- synchronize_and_free_events, at the start of release_cached_blocks (empty_cache and the last
  retry before an OOM): wait for every event and free all such blocks.

A trace has no GPU clock, so "the event has completed" is approximated by the next
synchronisation that orders the recording stream's work before what comes next: the host
waiting for that stream (torch.cuda.synchronize, Stream.synchronize, Event.synchronize on an
event recorded on it after the free), or the block's own allocation stream waiting for it
(`alloc_stream.wait_stream(s)`, `alloc_stream.wait_event(e)` with `e` recorded on `s` after the
free): from then on work on the allocation stream runs after the uses, so reusing the block
there is safe. Events on one stream complete in order, so a later completed event completes
the earlier ones too. Waits by other streams complete nothing.

Time is the model's clock: one tick per malloc or free. An event covers what was queued on its
stream up to the tick at which it was recorded (`marker`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from .blocks import Block

HOST = -1  # the waiter of a host-side synchronize
ALL_STREAMS = -1  # the stream of a device-wide synchronize


class StreamEvents:
    """cuda_events of one DeviceCachingAllocator: per stream, (tick, block) in record order."""

    def __init__(self) -> None:
        self._queues: dict[int, deque[tuple[int, Block]]] = {}
        self._host_done: dict[int, int] = {}  # stream -> tick the host has waited up to
        self._waited: dict[tuple[int, int], int] = {}  # (waiter, stream) -> tick waited up to
        self._host_all = -1  # tick up to which a device-wide synchronize waited
        self.pending_bytes = 0  # freed by the caller, not yet back in a pool

    def __bool__(self) -> bool:
        return bool(self._queues)

    def insert(self, block: Block, streams: set[int], tick: int) -> None:
        """insert_events: one event per stream that used the block."""
        for stream in sorted(streams):
            block.event_count += 1
            self._queues.setdefault(stream, deque()).append((tick, block))
        self.pending_bytes += block.size

    def waited(self, waiter: int, stream: int, marker: int) -> None:
        """`waiter` (a stream, or HOST) waited for `stream`'s work up to tick `marker`
        (`stream` ALL_STREAMS: every stream, a device synchronize)."""
        if waiter == HOST:
            if stream == ALL_STREAMS:
                self._host_all = max(self._host_all, marker)
            else:
                self._host_done[stream] = max(self._host_done.get(stream, -1), marker)
        elif stream != ALL_STREAMS and waiter != stream:
            key = (waiter, stream)
            self._waited[key] = max(self._waited.get(key, -1), marker)

    def _done(self, stream: int, tick: int, block: Block) -> bool:
        return tick <= max(self._host_all, self._host_done.get(stream, -1),
                           self._waited.get((block.stream, stream), -1))

    def completed(self) -> Iterator[Block]:
        """process_events: pop the completed events; yield each block with none left."""
        for stream in list(self._queues):
            queue = self._queues[stream]
            last = -1  # in-order completion: the last completed event completes those before
            for i, (tick, block) in enumerate(queue):
                if self._done(stream, tick, block):
                    last = i
            for _ in range(last + 1):
                _, block = queue.popleft()
                yield from self._release(block)
            if not queue:
                del self._queues[stream]

    def drain(self) -> Iterator[Block]:
        """synchronize_and_free_events: every event completes."""
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            for _, block in queue:
                yield from self._release(block)

    def _release(self, block: Block) -> Iterator[Block]:
        block.event_count -= 1
        if block.event_count == 0:
            self.pending_bytes -= block.size
            yield block

    def pending(self) -> Iterator[Block]:
        """Blocks still waiting for their events (each once)."""
        seen: set[int] = set()
        for queue in self._queues.values():
            for _, block in queue:
                if id(block) not in seen:
                    seen.add(id(block))
                    yield block
