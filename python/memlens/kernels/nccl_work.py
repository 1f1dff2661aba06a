"""Where ProcessGroupNCCL runs a collective and how long it keeps the tensors, as PyTorch 2.13
does it (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp), applied to the trace's fake groups.

- async_op=False (the default of dist.all_reduce & co.): `collective()` enqueues the kernel on
  the *current* stream and returns no work; nothing is stashed or recorded. Memory: nothing
  changes, a freed tensor is reusable at once.
- async_op=True (DDP's reducer and comm hooks, Megatron's overlapped grad reduce and param
  gather, `handle = dist.all_reduce(t, async_op=True)`, every functional collective):
  the op runs on the group's NCCL stream for that device (`ncclStreams_[key]`, one per process
  group and device, made by initializeDeviceStateForComm), which first waits for the current
  stream (syncStream). Instead of recordStream, the work stashes its inputs and outputs
  (`stashed_for_allocator_safety_`, a TensorShelf holding references), so a tensor the script
  drops before `wait()` stays allocated. `work.wait()` (synchronizeStream) makes the current
  stream wait for the work's end event, then unstashes: the blocks go back to their own
  (current-stream) pool with no stream uses. A work never waited for is unstashed by the main
  thread at the group's next enqueue, once the watchdog has seen it complete (workEnqueue
  empties `shelvesToUnstash_`); with no GPU clock the trace takes every earlier work of the
  group as complete by then.
- TORCH_NCCL_AVOID_RECORD_STREAMS: deprecated, stashing is the default ("... is the default
  now, this environment variable is thus deprecated"): setting it changes nothing.
- send/recv/isend/irecv (pointToPoint): always on an NCCL stream (an unbatched op gets a
  2-rank communicator, and stream, per pair of ranks, keyed "low:high"; inside
  batch_isend_irecv the group's own), after syncStream; these still call
  `recordStream(tensor, ncclStream)` and stash nothing, so a tensor freed before the stream is
  waited for goes back to its pool only then (allocator/stream_events.py). The work's
  `outputs_` (the tensor, for send too) lives as long as the script holds the work: taken here
  as until its wait. (An async all_reduce's handle keeps its tensor the same way after the
  wait: patches/torch_distributed.py's work holds it in its future, as `future_` does.)
- Allocations of the op's own: list all_gather (equal sizes) and list reduce_scatter allocate a
  flat buffer of all the group's chunks (`newLikeFlat`) on the current stream before
  `collective()`, stashed with the inputs/outputs when async; barrier allocates a 1-element
  float `zeros` on the current stream (and, synchronous, then synchronizes the current stream
  with the host). Nothing is allocated on an NCCL stream.
- Functional collectives (`_c10d_functional.*`, DTensor's redistributions) call the group with
  the default asyncOp=true: output (allocated on the current stream) and input are stashed
  until `wait_tensor` on the output (Functional.cpp register_work / wait_tensor -> work.wait()).
- Layer replay (engine/layer_replay.py): while a block is recorded, each collective notes what it
  does beyond the ledger (the enqueue that unstashes the group's completed works, the syncStream
  and work of an asynchronous one, its wait) among the block's ledger operations, and
  `replayed` does it again for a replayed block. Sends and receives are not replayed.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from ..allocator.stream_events import HOST
from ..cuda.streams import STREAMS
from .cuda import _group_name, _process_group

_P2P = frozenset({"send", "recv_", "recv_any_source_"})
# Ops that allocate a flat buffer of all chunks (ProcessGroupNCCL::allgather / reduce_scatter
# with equal sizes): the name and the argument index of the list of chunks.
_FLATTENED = {"allgather_": 0, "reduce_scatter_": 1}


def _tensors(obj, into: list) -> list:
    if isinstance(obj, torch.Tensor):
        into.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors(item, into)
    return into


class _Work:
    __slots__ = ("group", "device", "stream", "held", "temporaries", "next_issue")

    def __init__(self, group, device: int, stream: int, held: list, temporaries: list) -> None:
        self.group = group
        self.device = device
        self.stream = stream
        self.held = held  # the stash: references keep the storages (and their blocks) alive
        self.temporaries = temporaries  # rids of the op's own buffers, freed with the stash
        self.next_issue: int | None = None  # allocator tick of the next op on its stream


class NcclWorks:
    """The NCCL streams of the simulated rank and the works in flight on them."""

    def __init__(self, ledger, book_temporary: Callable[[int, torch.device], int]) -> None:
        self.ledger = ledger
        self._book_temporary = book_temporary  # (bytes, device) -> rid of a temporary
        self._streams: dict[tuple, int] = {}  # (group key, device, pair or None) -> stream id
        self._last: dict[int, _Work] = {}  # stream -> the latest work issued on it
        self._pending: dict[object, list[_Work]] = {}  # group key -> works not yet unstashed
        self._by_seq: dict[int, _Work] = {}  # FakeWork.seq_id -> work, until waited for
        self._by_rid: dict[int, _Work] = {}  # functional output's allocation -> work
        self._batch: list[_Work] | None = None  # inside batch_isend_irecv
        # Stream events this model appended to the ledger: a recorded block's (layer replay)
        # are its collectives', which the replay runs again (`replayed`), not the script's.
        self.stream_events_made = 0

    # -- streams ---------------------------------------------------------------------------
    def _stream(self, group, device: int, pair: str | None) -> int:
        key = (_group_key(group), device, pair)
        sid = self._streams.get(key)
        if sid is None:
            sid = self._streams[key] = STREAMS.devices().new_stream()
            name = f"nccl:{_group_name(group)}" + (f" p2p {pair}" if pair else "")
            self.ledger.stream_named(sid, name, None)
        return sid

    # -- ops -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _making_events(self):
        """The stream events appended inside the block are this model's (stream_events_made)."""
        before = len(self.ledger.stream_events)
        try:
            yield
        finally:
            self.stream_events_made += len(self.ledger.stream_events) - before

    def issued(self, func, args: tuple, kwargs: dict, out) -> None:
        """A c10d op (or functional collective) has run its fake kernel."""
        with self._making_events():
            self._issued(func, args, kwargs, out)

    def _issued(self, func, args: tuple, kwargs: dict, out) -> None:
        name = func._schema.name.partition("::")[2]
        tensors = [t for t in _tensors(args, []) if t.device.type == "cuda"]
        group = _process_group(args)
        if group is None or not tensors:
            return
        device = tensors[0].device.index or 0
        functional = func.namespace != "c10d"
        if name in _P2P:
            self._tape("unsupported", "point-to-point sends and receives")
            self._unstash_earlier(group)
            self._point_to_point(group, device, tensors, args, out)
            return
        self._tape("enqueue", group)
        self._unstash_earlier(group)  # workEnqueue: shelves of completed works
        async_op = True if functional else _argument(func, args, kwargs, "async_op", True)
        temporaries = self._own_buffers(name, args, tensors[0].device)
        if not async_op:  # on the current stream; nothing held past the op
            for rid in temporaries:
                self.ledger.free(rid)
            if name == "barrier":  # a synchronous barrier: currentStream.synchronize()
                self._tape("barrier", device)
                STREAMS.waited(device, HOST, STREAMS.current_id(device), None)
            return
        held = tensors + ([t for t in _tensors(out, []) if t.device.type == "cuda"]
                          if functional else [])
        work = self._enqueue_async(group, device, held, temporaries)
        if functional:
            for t in held[len(tensors):]:
                rid = self.ledger.storage_rid(t.untyped_storage())
                if rid is not None:
                    self._by_rid[rid] = work
        else:
            self._register(out, work)

    def _point_to_point(self, group, device: int, tensors: list, args: tuple, out) -> None:
        if self._batch is not None:  # ncclGroupStart'ed: the group's own communicator
            pair = None
        else:
            peer = int(args[2])
            me = group.rank()
            pair = f"{min(me, peer)}:{max(me, peer)}"
        stream = self._stream(group, device, pair)
        STREAMS.waited(device, stream, STREAMS.current_id(device), None)  # syncStream
        for t in tensors:  # recordStream(tensor.storage().data_ptr(), ncclStream)
            rid = self.ledger.storage_rid(t.untyped_storage())
            if rid is not None:
                self.ledger.record_stream(rid, stream)
        # The work keeps the tensor in `outputs_` for as long as the script holds the work;
        # held here until its wait (the script drops its handle then, as a rule).
        work = self._issue(group, device, stream, tensors, [])
        if self._batch is not None:
            self._batch.append(work)
        else:
            self._register(out, work)

    def _enqueue_async(self, group, device: int, held: list, temporaries: list) -> _Work:
        """An asynchronous collective on the group's NCCL stream, after syncStream."""
        stream = self._stream(group, device, None)
        STREAMS.waited(device, stream, STREAMS.current_id(device), None)  # syncStream
        work = self._issue(group, device, stream, held, temporaries)
        self._tape("async", group, device, work)
        return work

    def _issue(self, group, device, stream, held, temporaries) -> _Work:
        previous = self._last.get(stream)
        if previous is not None:
            previous.next_issue = STREAMS.marker(device)
        work = self._last[stream] = _Work(group, device, stream, held, temporaries)
        self._pending.setdefault(_group_key(group), []).append(work)
        return work

    def _own_buffers(self, name: str, args: tuple, device: torch.device) -> list[int]:
        """Buffers ProcessGroupNCCL allocates itself, on the current stream."""
        if name == "barrier":
            return [self._book_temporary(4, device)]  # at::zeros({1}, kFloat)
        index = _FLATTENED.get(name)
        if index is None or index >= len(args):
            return []
        chunks = _tensors(args[index], [])
        if not chunks or len({tuple(t.shape) for t in chunks}) != 1:
            return []  # unequal sizes: coalesced broadcasts/reduces, no flat buffer
        return [self._book_temporary(sum(t.numel() * t.element_size() for t in chunks), device)]

    def _register(self, out, work: _Work) -> None:
        for obj in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(obj, torch.ScriptObject):
                seq = _seq_id(obj)
                if seq is not None:
                    self._by_seq[seq] = work

    # -- completion ------------------------------------------------------------------------
    def waited(self, seq_id: int) -> None:
        """`work.wait()` / `work.synchronize()` on the work the fake kernel returned."""
        work = self._by_seq.pop(seq_id, None)
        for one in (work.works if isinstance(work, _Batch) else [work] if work else []):
            self._synchronize(one)

    def wait_tensor(self, t: torch.Tensor) -> None:
        """`_c10d_functional.wait_tensor(t)`: waits for the work that produced `t`."""
        try:
            rid = self.ledger.storage_rid(t.untyped_storage())
        except (RuntimeError, NotImplementedError):
            return
        work = self._by_rid.pop(rid, None) if rid is not None else None
        if work is not None:
            self._synchronize(work)

    def _synchronize(self, work: _Work) -> None:
        """synchronizeStream: the current stream waits for the end event, then unstash. The end
        event covers the stream's work up to the next op issued on it (nothing else runs on an
        NCCL stream), everything so far when there is none."""
        self._tape("wait", work)
        with self._making_events():
            self._wait_for(work)

    def _wait_for(self, work: _Work) -> None:
        STREAMS.waited(work.device, STREAMS.current_id(work.device), work.stream,
                       work.next_issue)
        self._unstash(work)
        pending = self._pending.get(_group_key(work.group), [])
        if work in pending:
            pending.remove(work)

    def _unstash_earlier(self, group) -> None:
        for work in self._pending.pop(_group_key(group), []):
            self._unstash(work)

    def _unstash(self, work: _Work) -> None:
        work.held = []
        for rid in work.temporaries:
            self.ledger.free(rid)
        work.temporaries = []

    @contextlib.contextmanager
    def batched(self):
        """Inside batch_isend_irecv; yields the works of its ops, for the works it returns."""
        outer, self._batch = self._batch, []
        try:
            yield self._batch
        finally:
            self._batch = outer

    def batch_returned(self, works: list, batch: list[_Work]) -> None:
        """batch_isend_irecv's works: waiting for any waits for the whole group."""
        for w in works or []:
            seq = getattr(w, "seq_id", None)
            if seq is not None and batch:
                self._by_seq[seq] = _Batch(batch)

    # -- layer replay (engine/layer_replay.py) ----------------------------------------------
    def _tape(self, kind: str, *what) -> None:
        """While a block is recorded, what a collective does beyond the ledger is noted among
        its ledger operations, for `replayed` to do again in a replayed block."""
        tap = self.ledger.tap
        if tap is not None:
            tap.append(("nccl", kind, *what))

    def replayed(self, entry: tuple, works: list) -> None:
        """A recorded block's collective (`_tape`), done again for a replayed block: the
        streams' waits and the works' bookkeeping. What it allocated and freed is among the
        recording's ledger operations; a replayed work holds no tensors. `works`: the block's
        replayed works, in order; an entry names its work by index."""
        kind = entry[1]
        with self._making_events():
            if kind == "enqueue":
                self._unstash_earlier(entry[2])
            elif kind == "barrier":
                device = entry[2]
                STREAMS.waited(device, HOST, STREAMS.current_id(device), None)
            elif kind == "async":
                works.append(self._enqueue_async(entry[2], entry[3], [], []))
            elif kind == "wait":
                self._wait_for(works[entry[2]])

    def close(self) -> None:
        """The trace is over: let go of every stash."""
        for works in self._pending.values():
            for work in works:
                work.held = []
        self._pending.clear()
        self._by_seq.clear()
        self._by_rid.clear()
        self._last.clear()


class _Batch(_Work):
    """The coalesced work of a batch_isend_irecv: its wait synchronizes every op in it."""

    def __init__(self, works: list[_Work]) -> None:
        first = works[0]
        super().__init__(first.group, first.device, first.stream, [], [])
        self.works = works


def _group_key(group):
    return getattr(group, "group_name", None) or id(group)


def _argument(func, args: tuple, kwargs: dict, name: str, default):
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if name in kwargs:
                return kwargs[name]
            return args[i] if i < len(args) else default
    return default


def _seq_id(obj) -> int | None:
    import torch.distributed as dist

    try:
        return int(dist.Work.unbox(obj).seq_id)
    except (AttributeError, RuntimeError, TypeError):
        return None
