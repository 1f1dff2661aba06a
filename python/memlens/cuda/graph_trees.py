"""Inductor's CUDA graph trees on the simulated GPU: `torch.compile(mode="reduce-overhead")`
(and `"max-autotune"`, `options={"triton.cudagraphs": True}`).

Inductor runs each graph it compiled (a forward, its backward, an inference graph) through
one tree of CUDA graphs per device (torch 2.13, `_inductor/cudagraph_trees.py`). What its
calls allocate, and where, is modelled here; its data-pointer checks are not needed, as the
trace moves no data. The model plugs in where Inductor asks how to wrap a compiled graph
(`config.cudagraph_policy`, a `CUDAGraphPolicy`, set for the trace by
`patches/torch_inductor_cuda.py`):

- A tree has a side stream and a private pool (`graph_pool_handle()`), kept alive by an empty
  graph captured into it when the tree starts (CUDAGraphTreeManager.__init__).
- Warm-up: the first call of a graph, and every call after a warm-up in the same generation,
  runs the compiled code with its allocations routed to the pool on the tree's stream
  (`_use_cuda_memory_pool_manager`): its buffers, outputs and cuBLAS workspace are in the pool.
- Recording: the next call. Its tensor inputs that are neither static (parameters, buffers)
  nor memory of the tree (a forward's saved activations in the backward) are copied into the
  pool; the graph is captured into the pool (cuda/graphs.py's FakeCUDAGraph), so every buffer
  of the compiled code is booked there, and its outputs stay in the pool.
- Replay: the calls after it on the same path of the tree. Nothing runs; the outputs are the
  recorded outputs' memory again: where the script still holds the previous call's output,
  the replay overwrites it (the same storage); where it let it go, the block is booked
  again in the pool (the allocator's checkpointed state marks it allocated). A graph's
  outputs that alias a static input alias it again.
- A generation is one invocation of the compiled region and the backward it leaves pending
  (or one `torch.compiler.cudagraph_mark_step_begin()`), as Inductor counts them; a node of
  the tree is a graph at one place of a generation's path (a forward, then its backward).
- A graph that mutates an input Inductor does not manage runs its compiled code outside the
  pool, as Inductor does.

Not modelled: re-recording when a static input's address changes (a trace's addresses do not
move), a node's end when all its outputs die within a generation, dynamic-shape keys beyond
the graph's int inputs, and the cuBLAS workspace being emptied around warm-ups and
recordings (the tree's stream keeps its one workspace, in the pool).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from typing import Any, Callable

import torch

from .graphs import GRAPHS

_FORWARD, _BACKWARD, _INFERENCE = "forward", "backward", "inference"


def _generation(mark_steps: int) -> int:
    """CUDAGraphTreeManager.get_curr_generation: the count of cudagraph_mark_step_begin
    calls (negative) if any, else Dynamo's count of compiled-region invocations.
    (cudagraph_trees.py cannot be imported from a CPU build of torch: it is not.)"""
    from torch._dynamo.mutation_guard import GenerationTracker

    return mark_steps if mark_steps != 0 else GenerationTracker.generation


class _Output:
    """How a recorded output comes back on a replay: a value, a view of a static input, or a
    view of one of the graph's own storages (`group`, of `nbytes`)."""

    def __init__(self, kind: str, value: Any = None, input_index: int = -1, group: int = -1,
                 nbytes: int = 0, meta: tuple = ()):
        self.kind, self.value, self.input_index = kind, value, input_index
        self.group, self.nbytes, self.meta = group, nbytes, meta


def _meta(t: torch.Tensor) -> tuple:
    return (t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())


class _Node:
    """A graph recorded at one place of the tree: its outputs' layout, and the tensors its
    latest call gave out for each of its storages (weakly: the script decides how long they
    live)."""

    def __init__(self, graph, layout: list[_Output], given: dict[int, list]):
        self.graph = graph  # the FakeCUDAGraph: keeps the pool's use while the tree lives
        self.layout = layout
        self.given = _weakly(given)

    def alive(self, group: int, dtype: torch.dtype) -> torch.Tensor | None:
        """A tensor of `dtype` the latest call gave out over the storage of `group`, still
        alive (a view the script made of it keeps it: views hold their base)."""
        for ref in self.given.get(group, ()):
            t = ref()
            if t is not None and t.dtype == dtype:
                return t
        return None


def _weakly(given: dict[int, list]) -> dict[int, list]:
    return {g: [weakref.ref(t) for t in ts] for g, ts in given.items()}


def _over(base: torch.Tensor, meta: tuple) -> torch.Tensor:
    """A tensor of `meta` over `base`'s storage, not a view of `base` (as a graph's output is
    not): `set_` to the storage, then its strides. (`set_` with an UntypedStorage argument
    would keep the storage alive under FakeTensorMode.)"""
    dtype, size, stride, offset = meta
    t = torch.empty((0,), dtype=dtype, device=base.device).set_(base)
    return t.as_strided_(size, stride, offset)


class _Tree:
    """One device's tree: its stream, pool, graphs warmed up, nodes recorded, and where the
    current generation is."""

    def __init__(self, trees: "GraphTrees", device_index: int):
        self.trees = trees
        self.device_index = device_index
        self.device = torch.device("cuda", device_index)
        with torch.cuda.device(device_index):
            self.stream = torch.cuda.Stream()
            self.stream.wait_stream(torch.cuda.current_stream())
            self.keepalive = torch.cuda.CUDAGraph()
            self.pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(self.keepalive, pool=self.pool, stream=self.stream):
                pass
        GRAPHS.name(self.pool[0], f"Inductor CUDA graph trees (cuda:{device_index})")
        self.warmed: set = set()
        self.nodes: dict[tuple, _Node] = {}
        self.state = "none"  # "warmup" | "recording" | "execution" along the current path
        self.path: tuple = ()
        self.generation: int | None = None
        self.pending_backward = False
        self._made: dict[int, weakref.ref] = {}  # id(storage) -> storage the tree gave out

    # -- one call of a graph --------------------------------------------------------------
    def run(self, graph: "_Graph", inputs: list) -> Any:
        generation = _generation(self.trees.mark_steps)
        if self.state != "none" and generation != self.generation and (
                generation < 0 or not self.pending_backward):  # < 0: cudagraph_mark_step_begin
            self.state, self.path = "none", ()
        self.generation = generation
        function = (graph.id, tuple(v for v in inputs if isinstance(v, int)))
        if graph.mutates_unmanaged(inputs, self.manages):
            out = graph.model(inputs)
        elif function not in self.warmed or self.state == "warmup":
            self.warmed.add(function)
            self.state = "warmup"
            with self.cublas_cleared(), self.allocating_in_pool():
                out = graph.model(inputs)
            self._remember(out)
        else:
            self.path += (function,)
            node = self.nodes.get(self.path) if self.state != "recording" else None
            if node is None:
                self.state = "recording"
                out, self.nodes[self.path] = self._record(graph, inputs)
            else:
                self.state = "execution"
                out = self._replay(node, inputs)
        if graph.mode == _FORWARD:
            self.pending_backward = True
        elif graph.mode == _BACKWARD:
            self.pending_backward = False
        return out

    @contextlib.contextmanager
    def allocating_in_pool(self):
        """`_use_cuda_memory_pool_manager`: this thread's allocations go to the pool, on the
        tree's stream, and the pool's use taken for it is given back after."""
        pool, stream_id = self.pool[0], int(self.stream.stream_id)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            GRAPHS.event(self.device_index, "pool_begin", pool, stream_id)
            try:
                yield
            finally:
                GRAPHS.event(self.device_index, "pool_end", pool)
                GRAPHS.event(self.device_index, "pool_release", pool)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)

    @contextlib.contextmanager
    def cublas_cleared(self):
        """`clear_cublas_manager`: the cuBLAS workspaces are freed before and after, so the
        graph's matmuls take theirs in the pool (and give them back to it)."""
        self.trees.clear_cublas()
        try:
            yield
        finally:
            self.trees.clear_cublas()

    def manages(self, t: torch.Tensor) -> bool:
        st = t.untyped_storage()
        ref = self._made.get(id(st))
        return ref is not None and ref() is st

    def _remember(self, out) -> None:
        for t in out if isinstance(out, (list, tuple)) else (out,):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                self._made[id(st)] = weakref.ref(st, functools.partial(self._forget, id(st)))

    def _forget(self, key: int, ref: weakref.ref) -> None:
        if self._made.get(key) is ref:  # not a newer storage that reuses the id
            del self._made[key]

    def _record(self, graph: "_Graph", inputs: list) -> tuple[Any, _Node]:
        static = set(graph.static_input_idxs)
        static |= {i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)
                   and self.manages(t)}
        # id -> (input index, storage): the storage held, so that its id stays its own
        statics = {id(st): (i, st) for i, st in
                   ((i, t.untyped_storage()) for i, t in enumerate(inputs)
                    if isinstance(t, torch.Tensor) and i in static)}
        with self.allocating_in_pool():  # the inputs' copies (`static_input`)
            recording = [t if not isinstance(t, torch.Tensor) or i in static else
                         torch.empty_strided(t.size(), t.stride(), dtype=t.dtype,
                                             device=t.device).copy_(t)
                         for i, t in enumerate(inputs)]
        inputs.clear()
        cuda_graph = torch.cuda.CUDAGraph()
        with self.cublas_cleared(), \
                torch.cuda.graph(cuda_graph, pool=self.pool, stream=self.stream):
            out = graph.model(recording)
        outs = out if isinstance(out, (list, tuple)) else (out,)
        layout: list[_Output] = []
        groups: dict[int, int] = {}
        given: dict[int, list] = {}
        for t in outs:
            if not isinstance(t, torch.Tensor):
                layout.append(_Output("value", value=t))
                continue
            st = t.untyped_storage()
            if id(st) in statics:
                layout.append(_Output("input", input_index=statics[id(st)][0], meta=_meta(t)))
                continue
            group = groups.setdefault(id(st), len(groups))
            given.setdefault(group, []).append(t)
            layout.append(_Output("storage", group=group, nbytes=st.nbytes(), meta=_meta(t)))
        self._remember(out)
        return out, _Node(cuda_graph, layout, given)

    def _replay(self, node: _Node, inputs: list) -> Any:
        node.graph.replay()
        static = {o.input_index: inputs[o.input_index] for o in node.layout if o.kind == "input"}
        inputs.clear()  # the caller's inputs are the graph's to free, as a compiled call's are
        bases: dict[int, torch.Tensor] = {}
        for o in node.layout:  # the script still holds it: the replay writes over it
            if o.kind == "storage" and o.group not in bases:
                alive = node.alive(o.group, o.meta[0])
                if alive is not None:
                    bases[o.group] = alive
        missing = {o.group: o.nbytes for o in node.layout
                   if o.kind == "storage" and o.group not in bases}
        if missing:  # let go: booked again where the recording had it, in the pool
            with self.allocating_in_pool():
                for group, nbytes in missing.items():
                    bases[group] = torch.empty((nbytes,), dtype=torch.uint8, device=self.device)
        out: list = []
        given: dict[int, list] = {}
        for o in node.layout:
            if o.kind == "value":
                out.append(o.value)
            elif o.kind == "input":
                out.append(_over(static[o.input_index], o.meta))
            else:
                base = bases[o.group]
                if base.dtype != o.meta[0]:
                    base = base.view(o.meta[0])
                out.append(_over(base, o.meta))
                given.setdefault(o.group, []).append(out[-1])
        del bases
        node.given = _weakly(given)
        self._remember(out)
        return out


class _Graph:
    """A compiled graph Inductor wrapped for CUDA graphs: its calls go through the tree."""

    _ids = itertools.count()

    def __init__(self, trees: "GraphTrees", model, static_input_idxs, device_index: int,
                 mode: str, mutated_input_idxs):
        self.trees, self.model, self.device_index, self.mode = trees, model, device_index, mode
        self.static_input_idxs = tuple(static_input_idxs)
        self.mutated_input_idxs = tuple(mutated_input_idxs)
        self.id = next(self._ids)

    def mutates_unmanaged(self, inputs: list, manages) -> bool:
        """Inductor's check_for_mutation: an input it mutates that is neither static nor the
        tree's memory keeps this graph out of CUDA graphs."""
        return any(i not in self.static_input_idxs and isinstance(inputs[i], torch.Tensor)
                   and not manages(inputs[i]) for i in self.mutated_input_idxs)

    def __call__(self, inputs: list) -> Any:
        return self.trees.tree(self.device_index).run(self, inputs)


class GraphTrees:
    """The trees of the simulated process, one per device, and Inductor's policy over them
    (`cudagraphify`, `should_wrap`, `wrap_output`: CUDAGraphPolicy's interface)."""

    def __init__(self) -> None:
        self._trees: dict[int, _Tree] = {}
        self.mark_steps = 0  # cudagraph_mark_step_begin calls, counted down as Inductor does
        # frees every cuBLAS workspace (the trace's accountant, set for the trace)
        self.clear_cublas: Callable[[], None] = lambda: None

    def tree(self, device_index: int) -> _Tree:
        found = self._trees.get(device_index)
        if found is None:
            found = self._trees[device_index] = _Tree(self, device_index)
        return found

    def mark_step_begin(self) -> None:
        """torch.compiler.cudagraph_mark_step_begin(): a new generation starts."""
        self.mark_steps -= 1

    def clear(self) -> None:
        self._trees.clear()
        self.mark_steps = 0

    def backward_without_graphs(self, device_index: int) -> None:
        """A backward Inductor could not graph after a graphed forward ran: it ends the
        forward's pending state (CUDAGraphTreeManager.set_to_running_backward)."""
        tree = self._trees.get(device_index)
        if tree is not None:
            tree.pending_backward = False

    def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index: int,
                     is_backward: bool, is_inference: bool, mutated_input_idxs=(),
                     **kwargs) -> _Graph:
        mode = _BACKWARD if is_backward else _INFERENCE if is_inference else _FORWARD
        return _Graph(self, model, static_input_idxs, device_index, mode, mutated_input_idxs)

    def should_wrap(self, compiled_graph) -> bool:
        return True

    def wrap_output(self, output_code):
        return output_code


TREES = GraphTrees()
