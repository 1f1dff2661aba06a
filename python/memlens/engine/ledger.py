"""The ledger: every allocation and free the traced step makes, in order.

The hot path only records raw facts (who allocated how much, when it was freed, what it turned
out to be); everything derived — phase tables, category peaks, module and line attribution,
the live set at the peak — is computed afterwards from these facts (see `snapshot/analysis.py`).

Sequence numbers: every alloc and free is one event; `seq` is its index in `events`.

Categories are decided by what a storage turns out to be, for its whole life: a buffer that an
optimizer keeps as state was optimizer state from its allocation, a temporary that autograd
saves is an activation from its allocation. So a record has one category, which the classifier
may correct after the allocation.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..allocator.replay import pool_event


_NONE = object()


class Record:
    """One allocation: a storage (or a modelled kernel workspace) from alloc to free."""

    __slots__ = ("nbytes", "size", "device", "dtype", "shape", "category", "module", "phase",
                 "op", "stack", "alloc_seq", "free_seq", "stream", "backward", "sub")

    def __init__(self, nbytes, size, device, dtype, shape, category, module, phase, op, stack,
                 alloc_seq, stream=0, backward=False):
        self.nbytes = nbytes  # requested bytes
        self.size = size  # bytes as the target allocator rounds them
        self.device = device
        self.dtype = dtype
        self.shape = shape
        self.category = category
        self.module = module  # module index or -1
        self.phase = phase
        self.op = op  # op-name index
        self.stack = stack  # stack id
        self.alloc_seq = alloc_seq
        self.free_seq = -1  # -1 while alive
        self.stream = stream
        self.backward = backward  # allocated while autograd ran a backward node
        self.sub = 0  # subcategory (categories.SUB_*), 0: none


class Ledger:
    def __init__(self, round_size=lambda n: n, allocator_for=None) -> None:
        """`allocator_for(device) -> model | None`: the allocator model that decides block sizes
        on a device (the CUDA caching allocator hands out whole blocks, up to 1 MiB larger than
        the 512 B-rounded request, and that is what memory_allocated() counts)."""
        self.round_size = round_size
        self._allocator_for = allocator_for
        self.allocators: dict[str, Any] = {}
        self.ooms: list[tuple[int, Any]] = []  # (record id, OomInfo) of refused allocations
        # device -> [(seq, reserved, allocated, segments, {stream: reserved}, {pool: reserved})]:
        # the model's state after each event that changed its reserved bytes (a new segment,
        # or a cache release before an OOM), in all, per stream and per CUDA graph pool.
        self.reserved: dict[str, list[tuple[int, int, int, int, dict[int, int],
                                            dict[int, int]]]] = {}
        # CUDA graph pool id -> {"name", "place", "graphs": [capture places]} (cuda/graphs.py)
        self.graph_pools: dict[int, dict[str, Any]] = {}
        # stream id -> (name, "file:line" or None): where the script or a library made it
        # (cuda/streams.py names it after what it was assigned to; kernels/nccl_work.py names
        # ProcessGroupNCCL's streams after their group).
        self.stream_names: dict[int, tuple[str, str | None]] = {}
        self._refused: set[int] = set()
        self.records: list[Record] = []
        self.events: list[int] = []  # rid for an alloc, ~rid for a free
        self.current: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_seq: dict[str, int] = {}
        self.ops: list[str] = []
        self._op_ids: dict[str, int] = {}
        self.modules: list[Any] = []  # filled by the module tracker (index = module id)
        self._live: dict[int, int] = {}  # id(storage) -> rid
        self._refs: dict[int, weakref.ref] = {}
        self.module_events: list[tuple[int, int, int]] = []  # (seq, module, +1 enter / -1 exit)
        # rid -> [(module, requested bytes)]: one allocation that holds several modules' data
        # (a library's flat parameter or gradient buffer), for per-module tables only.
        self.shares: dict[int, list[tuple[int, int]]] = {}
        # device -> the calling thread's current stream there (None: everything on stream 0)
        self.stream_of = None
        # What orders streams, for the allocator model (allocator/stream_events.py), each after
        # event `seq`: (seq, device, "record_stream", rid, stream) and
        # (seq, device, "wait", waiter, stream, marker); and what changes its pools:
        # (seq, device, "pool_create" | "pool_begin" | "pool_join" | "pool_end" | "pool_release",
        # pool, stream) for private pools (CUDA graphs', MemPools'), and
        # (seq, device, "empty_cache", pool, 0): every pool's unused segments (pool 0) or one's.
        self.stream_events: list[tuple] = []
        # While a block is recorded (engine/layer_replay.py): its allocations, frees and
        # category changes, in order: ("alloc", rid, category, module, sub), ("free", rid),
        # ("cat", rid, category, module, sub).
        self.tap: list[tuple] | None = None

    # -- interning -------------------------------------------------------------------------
    def op_id(self, name: str) -> int:
        oid = self._op_ids.get(name)
        if oid is None:
            oid = self._op_ids[name] = len(self.ops)
            self.ops.append(name)
        return oid

    # -- events ----------------------------------------------------------------------------
    def alloc(self, nbytes: int, device: str, dtype: str, shape: tuple, category: int,
              module: int, phase: int, op: int, stack: int, stream: int | None = None,
              backward: bool = False) -> int:
        rid = len(self.records)
        model = self.allocator(device)
        if stream is None:
            stream = self.stream_of(device) if self.stream_of is not None and model is not None \
                else 0
        if model is not None:
            result = model.malloc(rid, nbytes, stream)
            size = result.size
            if not result.ok:  # out of memory: keep tracing, as if the device were larger
                size = self.round_size(nbytes)
                self.ooms.append((rid, result.oom))
                self._refused.add(rid)
        else:
            size = self.round_size(nbytes) if device != "cpu" else nbytes
        self.records.append(Record(nbytes, size, device, dtype, shape, category, module, phase,
                                   op, stack, len(self.events), stream, backward))
        self.events.append(rid)
        if model is not None:
            changes = self.reserved.get(device)
            if model.reserved_by_stream != (changes[-1][4] if changes else {}) or \
                    model.reserved_by_pool != (changes[-1][5] if changes else {}):
                self._note_reserved(device, model)
        if self.tap is not None:
            self.tap.append(("alloc", rid, category, module, 0))
        cur = self.current.get(device, 0) + size
        self.current[device] = cur
        if cur > self.peak.get(device, -1):
            self.peak[device] = cur
            self.peak_seq[device] = len(self.events) - 1
        return rid

    def free(self, rid: int) -> None:
        rec = self.records[rid]
        if rec.free_seq >= 0:
            return
        rec.free_seq = len(self.events)
        self.events.append(~rid)
        if self.tap is not None:
            self.tap.append(("free", rid))
        self.current[rec.device] -= rec.size
        model = self.allocators.get(rec.device)
        if model is not None and rid not in self._refused:
            model.free(rid)  # a free only caches the block: reserved memory stays

    # -- streams ---------------------------------------------------------------------------
    def record_stream(self, rid: int, stream: int) -> None:
        """`Tensor.record_stream(stream)` on a live allocation."""
        rec = self.records[rid]
        model = self.allocators.get(rec.device)
        if model is None or rec.free_seq >= 0 or rid in self._refused:
            return
        model.record_stream(rid, stream)
        self.stream_events.append((self.seq, rec.device, "record_stream", rid, stream))

    def stream_named(self, stream: int, name: str, place: str | None) -> None:
        """A stream was made (`torch.cuda.Stream()`): what to call it in the snapshot."""
        self.stream_names[stream] = (name, place)

    def stream_marker(self, device: str) -> int:
        """The allocator model's clock on `device`: what an event recorded now covers."""
        model = self.allocators.get(device)
        return model.clock if model is not None else 0

    def stream_waited(self, device: str, waiter: int, stream: int, marker: int | None) -> None:
        """`waiter` (a stream or -1, the host) waited for `stream` (-1: all) up to `marker`."""
        model = self.allocators.get(device)
        if model is None or not model.events:
            # No block waits for an event: a wait covers only what was queued up to now, so it
            # can complete none of the events later frees record.
            return
        marker = model.clock if marker is None else marker
        model.stream_waited(waiter, stream, marker)
        self.stream_events.append((self.seq, device, "wait", waiter, stream, marker))

    def allocator_events(self, device: str, n_events: int):
        """The events of `device` as allocator.replay takes them: allocs and frees in order,
        and the streams' record_stream and waits at their places among them."""
        records = self.records
        extra = [e for e in self.stream_events if e[1] == device]
        k = 0
        while k < len(extra) and extra[k][0] < 0:
            yield _replay_stream_event(extra[k])
            k += 1
        for seq, ev in enumerate(self.events[:n_events]):
            rid = ev if ev >= 0 else ~ev
            rec = records[rid]
            if rec.device == device:
                yield ("alloc" if ev >= 0 else "free", rid, rec.nbytes, rec.stream)
            while k < len(extra) and extra[k][0] == seq:
                yield _replay_stream_event(extra[k])
                k += 1

    def empty_cache(self, device: str) -> None:
        """torch.cuda.empty_cache(): the model releases its unused cached segments."""
        model = self.allocators.get(device)
        if model is not None:
            model.empty_cache()
            self.stream_events.append((self.seq, device, "empty_cache", 0, 0))
            self._note_reserved(device, model)

    # -- private pools: CUDA graphs' and MemPools' (cuda/graphs.py, cuda/mem_pools.py) -----
    def pool_event(self, device: str, kind: str, pool: int, stream: int = 0) -> None:
        """A MemPool made `pool` ("pool_create"), a capture into `pool` (or use_mem_pool's
        routing to it, on every stream: -1) began on `stream` ("pool_begin"), `stream` joined
        it ("pool_join"), it ended ("pool_end"), or a graph or MemPool using it let go of it
        ("pool_release"), or its unused segments were let go ("empty_cache"): the allocator
        model follows, and replays of the events see it at the same place."""
        model = self.allocator(device)
        if model is None:
            return
        pool_event(model, kind, pool, stream)
        self.stream_events.append((self.seq, device, kind, pool, stream))
        if kind == "empty_cache":  # one pool's (a MemPool's destruction)
            self._note_reserved(device, model)

    def _note_reserved(self, device: str, model) -> None:
        self.reserved.setdefault(device, []).append(
            (len(self.events) - 1, model.reserved_bytes, model.allocated_bytes,
             model.segment_count(), dict(model.reserved_by_stream),
             dict(model.reserved_by_pool)))

    def share(self, rid: int, parts: list[tuple[int, int]]) -> None:
        """Split one allocation between modules, `[(module, requested bytes)]`, for the module
        tables; what the parts leave of its bytes stays with its own module."""
        self.shares[rid] = parts

    def module_bytes(self, rid: int):
        """(module, bytes) pairs of an allocation: its shares scaled to its rounded size (the
        rest, padding and rounding, with its own module), or itself whole."""
        rec = self.records[rid]
        parts = self.shares.get(rid)
        if not parts:
            yield rec.module, rec.size
            return
        given = 0
        for module, nbytes in parts:
            given += nbytes
            yield module, nbytes
        if rec.size > given:
            yield rec.module, rec.size - given

    def recategorize(self, rid: int, category: int, module: int | None = None,
                     sub: int = 0) -> None:
        if self.tap is not None:
            self.tap.append(("cat", rid, category, module, sub))
        rec = self.records[rid]
        rec.category = category
        rec.sub = sub
        if module is not None and module >= 0:
            rec.module = module

    def allocator(self, device: str):
        model = self.allocators.get(device, _NONE)
        if model is _NONE:
            model = self.allocators[device] = (self._allocator_for(device)
                                               if self._allocator_for else None)
        return model

    # -- storages --------------------------------------------------------------------------
    def storage_rid(self, storage) -> int | None:
        return self._live.get(id(storage))

    def track_storage(self, storage, rid: int) -> None:
        """Free the record when the storage object dies (storages keep their Python object for
        as long as any tensor uses them, so the weakref fires exactly at the real free)."""
        key = id(storage)
        self._live[key] = rid
        self._refs[key] = weakref.ref(storage, lambda _, key=key: self._storage_died(key))

    def _storage_died(self, key: int) -> None:
        self._refs.pop(key, None)
        rid = self._live.pop(key, None)
        if rid is not None:
            self.free(rid)

    def retarget_storage(self, storage, rid: int) -> None:
        """A storage was resized: it now belongs to a new record."""
        self._live[id(storage)] = rid

    def untrack_all(self) -> None:
        """Stop listening to storage deaths (the trace is over)."""
        self._refs.clear()
        self._live.clear()

    def live_rids(self) -> list[int]:
        return list(self._live.values())

    @property
    def seq(self) -> int:
        """The index of the latest event (-1 before the first)."""
        return len(self.events) - 1


def _replay_stream_event(event: tuple) -> tuple:
    if event[2] in ("record_stream", "pool_create", "pool_begin", "pool_join", "pool_end",
                    "pool_release", "empty_cache"):
        return (event[2], event[3], 0, event[4])
    return ("wait", event[3], event[5], event[4])
