"""CUDA graphs on the simulated GPU: capture runs once under the trace, replay books nothing.

``torch.cuda.CUDAGraph`` (a C++ class, absent from a CPU build) is replaced by ``FakeCUDAGraph``
and ``torch.cuda.graph_pool_handle`` / ``is_current_stream_capturing`` answer from it, so
``torch.cuda.graph``, ``make_graphed_callables`` and hand-written capture_begin/capture_end run
unchanged (they are Python over these). What each call means for the trace:

- ``capture_begin(pool=None)`` (on the current stream, which must not be the default stream,
  as in CUDAGraph.cpp): the allocator model starts routing that stream's allocations to the
  graph's private pool (``pool`` shares another graph's or a ``graph_pool_handle()``'s), as
  ``beginAllocateToPool`` does. The code up to ``capture_end`` runs once, under the accountant,
  like any code: its tensors are booked on the capture stream, in the pool.
- ``capture_end()``: ``endAllocateToPool``. Tensors the script keeps from the capture (static
  outputs, gradients) stay allocated, in the pool; what it dropped is free space of the pool.
- ``replay()``: no allocation and no free: on a GPU the graph's kernels write into the memory
  the capture allocated. The ledger and phases see nothing (a replayed optimizer step is not
  an iteration); the pool counts its replays for the report.
- ``reset()`` / the graph's destruction: ``releasePool``; the pool's unused segments go back
  at the next ``empty_cache()`` once every graph sharing it is gone.
- A stream that waits on a capturing stream inside the capture (``wait_stream``,
  ``wait_event``) joins the capture, as CUDA's stream capture forks: its allocations come from
  the pool too, until the capture ends.
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Protocol

import torch

from ..patches.patcher import Patcher, check_tested
from . import streams

_MEMLENS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


class GraphListener(Protocol):
    """Who is told of captures (the ledger, through cuda/ledger_memory.py)."""

    def graph_pool_event(self, device_index: int, kind: str, pool: int, stream: int) -> None: ...
    def graph_captured(self, pool: int, place: str | None) -> None: ...
    def graph_replayed(self, pool: int) -> None: ...
    def graph_pool_named(self, pool: int, name: str) -> None: ...
    def pool_segments(self, device_index: int, pool: int) -> list[dict]: ...


class GraphTable:
    """Pool ids and the captures under way in the simulated process."""

    def __init__(self) -> None:
        self._listener: GraphListener | None = None
        self._ids = itertools.count(1)
        self.capturing: dict[int, int] = {}  # capturing stream id -> pool id
        self.graphs: dict[int, Any] = {}  # capturing stream id -> the FakeCUDAGraph
        self.completed = 0  # captures that reached capture_end in this simulation
        self.generation = 0  # one more at each binding: a pool is of one simulation

    def bind(self, listener: GraphListener | None) -> None:
        self._listener = listener
        self.generation += 1
        self.capturing.clear()
        self.graphs.clear()
        if listener is not None:
            self.completed = 0

    @property
    def bound(self) -> bool:
        return self._listener is not None

    def new_pool_id(self) -> int:
        return next(self._ids)

    def event(self, device_index: int, kind: str, pool: int, stream: int = 0) -> None:
        if self._listener is not None:
            self._listener.graph_pool_event(device_index, kind, pool, stream)

    def captured(self, pool: int) -> None:
        if self._listener is not None:
            self._listener.graph_captured(pool, _user_place(sys._getframe(1)))

    def replayed(self, pool: int) -> None:
        if self._listener is not None:
            self._listener.graph_replayed(pool)

    def segments(self, device_index: int, pool: int) -> list[dict]:
        """The pool's segments now, in the shape of torch.cuda.memory_snapshot()'s."""
        if self._listener is None:
            return []
        return self._listener.pool_segments(device_index, pool)

    def name(self, pool: int, name: str) -> None:
        """Who made the pool, for the report (graph_trees.py names its trees' pools)."""
        if self._listener is not None:
            self._listener.graph_pool_named(pool, name)


GRAPHS = GraphTable()


def _user_place(frame) -> str | None:
    """The script's line that captured: the first frame outside memlens and torch
    (`with torch.cuda.graph(g):`, `make_graphed_callables(...)`)."""
    while frame is not None and frame.f_code.co_filename.startswith((_MEMLENS, _TORCH)):
        frame = frame.f_back
    if frame is None and torch._C._current_autograd_node() is not None:
        return "backward"  # autograd's thread: a compiled backward (Inductor's graph trees)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None


class FakeCUDAGraph:
    """Stand-in for ``torch.cuda.CUDAGraph`` (see the module's docstring)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._pool: int | None = None
        self._device = 0
        self._stream: int | None = None  # while capturing
        self._captured = False
        self._holds_pool = False  # counted among the pool's users (until reset)
        self._retained: list[int] = []  # MemPools' pools it keeps (use_mem_pool in a capture)

    def capture_begin(self, pool: tuple[int, int] | None = None,
                      capture_error_mode: str = "global",
                      check_input_liveness: bool = False) -> None:
        if self._captured or self._stream is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. To "
                               "capture a new graph, create a new instance.")
        stream = streams.STREAMS.current(None)
        if int(stream.stream_id) == 0:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. "
                               "(However, after capture, it's ok to replay them on the "
                               "default stream.)")
        self._pool = int(pool[0]) if pool is not None else GRAPHS.new_pool_id()
        self._device = stream.device_index
        self._stream = int(stream.stream_id)
        GRAPHS.capturing[self._stream] = self._pool
        GRAPHS.graphs[self._stream] = self
        GRAPHS.event(self._device, "pool_begin", self._pool, self._stream)
        self._holds_pool = True
        GRAPHS.captured(self._pool)

    def capture_end(self) -> None:
        if self._stream is None:
            raise RuntimeError("Called CUDAGraph::capture_end without capture_begin")
        for stream in [s for s, pool in GRAPHS.capturing.items() if pool == self._pool]:
            del GRAPHS.capturing[stream]  # the capturing stream and those that joined it
        GRAPHS.graphs.pop(self._stream, None)
        GRAPHS.event(self._device, "pool_end", self._pool)
        if sys.exc_info()[0] is None:  # not torch.cuda.graph's exit from a stopped trace
            GRAPHS.completed += 1
        self._stream = None
        self._captured = True

    def instantiate(self) -> None:
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::instantiate without a preceding capture")

    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        GRAPHS.replayed(self._pool)

    def reset(self) -> None:
        if self._stream is not None:  # reset inside a capture: end it first
            self.capture_end()
        if self._holds_pool and GRAPHS.bound:
            GRAPHS.event(self._device, "pool_release", self._pool)
            for pool in self._retained:
                GRAPHS.event(self._device, "pool_release", pool)
        self._holds_pool = False
        self._retained = []
        self._captured = False

    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return (self._pool, 0)

    def __del__(self) -> None:
        try:
            self.reset()
        except Exception:
            pass  # never raise from the garbage collector

    @staticmethod
    def get_currently_capturing_graph() -> "FakeCUDAGraph":
        """The graph capturing on the current stream (torch 2.14's use_mem_pool asks)."""
        pool = GRAPHS.capturing.get(streams.STREAMS.current_id(streams.STREAMS.devices().current()))
        # (a stream that joined a capture captures into its graph's pool)
        graph = next((g for g in GRAPHS.graphs.values() if g._pool == pool), None)
        if pool is None or graph is None:
            raise RuntimeError("get_currently_capturing_graph: no CUDA graph is capturing on "
                               "the current stream")
        return graph

    def _retain_pool(self, pool: Any) -> None:
        """torch 2.14's use_mem_pool inside a capture: the graph keeps the MemPool's pool (one
        user more, createOrIncrefPool) until it is reset."""
        pool_id = getattr(pool, "id", pool)
        pool_id = int(pool_id[0]) if isinstance(pool_id, tuple) else int(pool_id)
        GRAPHS.event(self._device, "pool_create", pool_id)
        self._retained.append(pool_id)

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        raise RuntimeError("memlens: a simulated CUDA graph has no kernels to dump")

    def register_generator_state(self, generator: Any) -> None:
        return None

    def raw_cuda_graph(self) -> int:
        raise RuntimeError("memlens: a simulated CUDA graph has no cudaGraph_t")

    def raw_cuda_graph_exec(self) -> int:
        raise RuntimeError("memlens: a simulated CUDA graph has no cudaGraphExec_t")


def _join_on_wait(device_index: int, waiter: int, stream: int) -> None:
    """`waiter` waited for `stream`: when `stream` is capturing, `waiter` joins its capture."""
    pool = GRAPHS.capturing.get(stream)
    if pool is not None and waiter >= 0 and waiter not in GRAPHS.capturing:
        GRAPHS.capturing[waiter] = pool
        GRAPHS.event(device_index, "pool_join", pool, waiter)


_CAPTURE_CALLS = ("torch.cuda.graph(", "CUDAGraph(", "make_graphed_callables(", ".capture_begin(")


def uncaptured_note(script_path: str | None, iterations: int) -> str | None:
    """When the trace stopped before any capture of a script that captures CUDA graphs
    completed (its warm-up iterations used up --iterations), say where it captures and what
    to do."""
    if GRAPHS.completed:
        return None
    try:
        with open(script_path or "", encoding="utf-8") as source:
            lines = source.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for number, line in enumerate(lines, 1):
        code = line.split("#", 1)[0]
        if any(call in code for call in _CAPTURE_CALLS):
            return (f"{script_path}:{number} captures a CUDA graph, but the trace stopped after "
                    f"{iterations} iteration(s), before a capture completed (warm-up iterations count): "
                    "trace more iterations (--iterations) to see the graph's memory pool")
    return None


def graph_pool_handle() -> tuple[int, int]:
    """torch.cuda.graph_pool_handle(): a new pool id, made on its first capture."""
    return (GRAPHS.new_pool_id(), 0)


def is_current_stream_capturing() -> bool:
    return streams.STREAMS.current_id(streams.STREAMS.devices().current()) in GRAPHS.capturing


def _stream_is_capturing(self: streams.FakeStream) -> bool:
    return int(self.stream_id) in GRAPHS.capturing


def install(patches: Patcher, cuda_modules: list[Any], listener: GraphListener | None) -> None:
    """Put the fake graphs in place (undone with `patches`) and send captures to `listener`."""
    check_tested("cuda_graphs", torch.__version__)
    import torch.cuda.graphs as torch_graphs

    for name, value in {"CUDAGraph": FakeCUDAGraph, "graph_pool_handle": graph_pool_handle,
                        "is_current_stream_capturing": is_current_stream_capturing}.items():
        patches.set_everywhere(cuda_modules, name, value)
    # What torch/cuda/graphs.py calls by its own global names.
    patches.setattr(torch_graphs, "_graph_pool_handle", graph_pool_handle)
    patches.setattr(torch_graphs, "_cuda_isCurrentStreamCapturing", is_current_stream_capturing)
    # torch.cuda.graph makes its default capture stream once per process: a simulated one,
    # dropped with the simulation.
    patches.setattr(torch_graphs.graph, "default_capture_stream", None)
    if not hasattr(torch._C, "_host_emptyCache"):  # a CPU build; torch.cuda.graph calls it
        patches.setattr(torch._C, "_host_emptyCache", lambda: None)
    patches.setattr(streams.FakeStream, "is_capturing", _stream_is_capturing)
    patches.setattr(streams.STREAMS, "on_wait", _join_on_wait)
    GRAPHS.bind(listener)
    patches.defer(lambda: GRAPHS.bind(None))
