"""Compiled regions: `torch.compile` traced as the compiled program allocates.

Dynamo captures the region's graphs (graph breaks split them as in a real run) and hands each
to a memlens backend:

- on the CPU target, Inductor itself (`compile_fx`): AOTAutograd with Inductor's
  decompositions and its min-cut partitioner picks what is saved for backward, Inductor's
  scheduler fuses, and its wrapper code allocates, reuses and frees the buffers. The wrapper runs
  for real on fake tensors; its kernels are no-ops (they only write into buffers the wrapper
  allocated: patches/torch_compile.py stubs their compilation), so every buffer of the compiled
  program is booked, in its order, and nothing else.
- on a CUDA target, Inductor too, with its GPU code: Triton kernels fused by its scheduler and
  the wrapper's `empty_strided_cuda` buffers, reused and freed as the wrapper says. Kernels are
  never built (patches/torch_inductor_cuda.py: no GPU is needed, Triton only has to be
  installed); extern kernels (mm, attention) run as fake ops.
- on a CUDA target without Triton, AOTAutograd with the same decompositions, joint-graph passes
  and partitioner; the partitioned ATen graphs run op by op (fx code frees each value after its
  last use). The saved set is modelled, fusion is not, and a note says so.

Compilation itself runs outside the tracer's dispatch modes (the accountant asks Dynamo to
ignore compile internals; AOTAutograd's lazy backward compile is wrapped here), and the
compiled graphs run inside them.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch.utils._python_dispatch import _disable_current_modes
from .modules import compiled_graph


class Region:
    """One `torch.compile` call site and what its graphs did."""

    def __init__(self, place: str, call: str):
        self.place, self.call = place, call
        self.how = "inductor"  # "inductor" | "partitioner" | "eager"
        self.graphs = 0
        self.graph_breaks = 0
        self.saved_bytes = 0  # saved for backward by the compiled program (not its inputs)
        self.eager_saved_bytes = 0  # the same joint graph partitioned as eager autograd saves
        self.eager_because = ""
        # its mode or options ask for CUDA graphs (reduce-overhead): Inductor's CUDA graph
        # trees run its graphs (cuda/graph_trees.py)
        self.cuda_graphs = False

    def to_json(self) -> dict:
        out = {"place": self.place, "call": self.call, "compiled_as": self.how,
               "graphs": self.graphs, "graph_breaks": self.graph_breaks,
               "saved_bytes": self.saved_bytes, "eager_saved_bytes": self.eager_saved_bytes}
        if self.eager_because:
            out["eager_because"] = self.eager_because
        if self.cuda_graphs:
            out["cuda_graphs"] = True
        return out


def saved_activation_bytes(joint: torch.fx.GraphModule, bw_module: torch.fx.GraphModule) -> int:
    """Bytes of the memory a backward graph receives from its forward, less the region's own
    inputs (parameters and arguments live anyway, and so do their views such as a weight's
    transpose): the storages of its placeholders other than `tangents_*`, each once, that are
    not the storage of one of the joint graph's `primals_*`."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(node):
        val = node.meta.get("val")
        return StorageWeakRef(val.untyped_storage()) if isinstance(val, torch.Tensor) else None

    inputs = {storage(n) for n in joint.graph.find_nodes(op="placeholder")
              if n.name.startswith("primals")}
    seen, total = set(), 0
    for node in bw_module.graph.find_nodes(op="placeholder"):
        ref = storage(node)
        if ref is None or node.name.startswith("tangents") or ref in inputs or ref in seen:
            continue
        seen.add(ref)
        total += _concrete(node.meta["val"].untyped_storage().nbytes())
    return total


def _concrete(n) -> int:
    """A size under dynamic shapes is symbolic: its value in this call (Dynamo's hint)."""
    if isinstance(n, torch.SymInt):
        return int(n.node.hint) if n.node.hint is not None else 0
    return int(n)


def _control_flow() -> tuple[type, ...]:
    """Exceptions Dynamo raises through a backend to restart or skip, never failures."""
    from torch._dynamo.exc import RestartAnalysis, SkipFrame

    return RestartAnalysis, SkipFrame


@contextlib.contextmanager
def _data_pointer_warning_ignored():
    """Autograd's C++ asks a graphed forward's outputs for their data pointers (torch 2.13),
    and FakeTensor warns: torch's code, not the script's. Only regions with CUDA graphs pay
    for the filter."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        yield


class CompiledPrograms:
    """The backends of one trace and the regions they compiled (snapshot meta.compiled_regions)."""

    def __init__(self, device_type: str, add_note, gpu_missing: str = ""):
        """`gpu_missing`: on a CUDA target, why Inductor's GPU code cannot be made ("" if it
        can)."""
        self.device_type = device_type
        self.gpu_missing = gpu_missing
        self.gpu_inductor = device_type == "cuda" and not gpu_missing
        self.add_note = add_note
        self.regions: list[Region] = []
        self._compiling: list[Region] = []  # the region whose graph is being partitioned
        self._calling: list[Region] = []  # the regions whose compiled calls are running
        # One backend for every region, as Inductor is one backend on a GPU: Dynamo keeps a
        # compiled graph only for the backend that made it (its BACKEND_MATCH test), so a new
        # backend per torch.compile call recompiled each of torchtitan's per-block compiled
        # blocks, and fullgraph=True failed past the recompile limit (8 blocks).
        self.backend = self._make_backend()

    def gpu_unavailable(self, why: str) -> None:
        """Inductor's GPU code cannot be made after all (Triton failed to import)."""
        self.gpu_missing, self.gpu_inductor = why, False

    def ask_for_cuda_graphs(self, region: Region) -> None:
        """The region's mode or options ask for CUDA graphs: on a CUDA target with Inductor's
        GPU code, its graphs run through the CUDA graph trees' model; else a note says why
        not (a CPU target has none: Inductor graphs only CUDA code)."""
        if self.device_type != "cuda":
            return
        import torch._inductor.config as inductor_config

        if not hasattr(inductor_config, "cudagraph_policy"):
            why = (f"torch {torch.__version__}'s Inductor has no cudagraph_policy, the seam "
                   "memlens models its CUDA graph trees through")
        elif not self.gpu_inductor:
            why = f"the trees need Inductor's GPU code, and {self.gpu_missing}"
        else:
            region.cuda_graphs = True
            return
        self.add_note(f"{region.place}: {region.call}: traced without CUDA graphs ({why}); "
                      "on a GPU its graphs' memory is in a private pool that stays reserved")

    def region(self, place: str, call: str) -> Region:
        found = next((r for r in self.regions if r.place == place and r.call == call), None)
        if found is None:
            found = Region(place, call)
            self.regions.append(found)
        return found

    def to_json(self) -> list[dict]:
        return [r.to_json() for r in self.regions if r.graphs or r.how == "eager"]

    # -- the partitioner, observed --------------------------------------------------------
    def partitioned(self, joint, joint_inputs, fw_module, bw_module, num_fwd_outputs: int) -> None:
        """The min-cut partitioner chose `bw_module`'s inputs: count them, and what the default
        partitioner (the values eager autograd would keep, nothing recomputed) keeps."""
        region = self._compiling[-1] if self._compiling else None
        if region is None:
            return
        region.saved_bytes += saved_activation_bytes(joint, bw_module)
        try:
            from torch._functorch.partitioners import default_partition

            _, eager_bw = default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)
            region.eager_saved_bytes += saved_activation_bytes(joint, eager_bw)
        except Exception:  # the comparison is a report detail; the compiled program is not
            pass

    # -- the backend Dynamo calls for each graph ------------------------------------------
    def _make_backend(self):
        def compile_graph(gm: torch.fx.GraphModule, example_inputs):
            # the region whose call Dynamo is compiling (a graph break's resumed frame too)
            region = self._calling[-1] if self._calling else self.region("", "torch.compile")
            region.graphs += 1
            self._compiling.append(region)
            saved = region.saved_bytes, region.eager_saved_bytes
            try:
                with _disable_current_modes():
                    if self.device_type == "cpu" or self.gpu_inductor:
                        return self._inductor(gm, example_inputs, region.cuda_graphs)
                    if region.how != "partitioner":
                        region.how = "partitioner"
                        self.add_note(
                            f"{region.place}: {region.call}: compiled for a {self.device_type} "
                            "target by AOTAutograd with Inductor's partitioner: what is saved "
                            "for backward is modelled, Inductor's fusion and buffer reuse are "
                            f"not (each ATen op's result is booked), as {self.gpu_missing}")
                    return self._partitioned(gm, example_inputs)
            except Exception as e:  # a part no model covers: this graph runs eagerly
                if isinstance(e, _control_flow()):  # Dynamo restarts its analysis: no failure
                    region.graphs -= 1
                    region.saved_bytes, region.eager_saved_bytes = saved
                    raise
                region.how = "eager"
                region.saved_bytes, region.eager_saved_bytes = saved  # nothing compiled ran
                first = (str(e).strip().splitlines() or [""])[0][:200]
                region.eager_because = f"{type(e).__name__}: {first}" if first \
                    else type(e).__name__
                self.add_note(f"{region.place}: {region.call}: a graph was traced eagerly, as "
                              f"memlens cannot model it ({region.eager_because})")
                return compiled_graph(gm).forward
            finally:
                self._compiling.pop()

        return compile_graph

    def _inductor(self, gm, example_inputs, cuda_graphs: bool):
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner(graph, inputs, **kwargs):
            with _disable_current_modes():  # AOTAutograd compiles backward lazily, in backward
                return compile_fx_inner(graph, inputs, **kwargs)

        # As mode="reduce-overhead" does (Inductor's list_mode_options): the backward,
        # compiled later, keeps the forward's choice.
        patches = {"triton.cudagraphs": True} if cuda_graphs else None
        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=patches)

    def _partitioned(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        from torch._inductor import config as inductor_config
        from torch._inductor.compile_fx import partition_fn
        from torch._inductor.decomposition import select_decomp_table

        def graph_runs_op_by_op(graph, inputs):
            graph.recompile()
            return compiled_graph(graph)

        def lazy_backward(graph, inputs):
            with _disable_current_modes():
                return graph_runs_op_by_op(graph, inputs)

        # Constant folding computes values on the device for real, and there is none. Folding
        # turns uniform tensors into `full` constants, which are rarely saved for backward
        # (test_compiled_cuda.py compares with the partitioner run with folding).
        with inductor_config.patch(joint_graph_constant_folding=False):
            return aot_autograd(fw_compiler=graph_runs_op_by_op, bw_compiler=lazy_backward,
                                partition_fn=partition_fn,
                                decompositions=select_decomp_table())(gm, example_inputs)

    @contextlib.contextmanager
    def calling(self, region: Region):
        """A call of the region's compiled code: the graphs Dynamo compiles in it are the
        region's, and so are the graph breaks it counts (when a frame is compiled, inside the
        call)."""
        from torch._dynamo.utils import counters

        before = sum(counters["graph_break"].values())
        self._calling.append(region)
        quiet = _data_pointer_warning_ignored() if region.cuda_graphs else contextlib.nullcontext()
        try:
            with quiet:
                yield
        finally:
            self._calling.pop()
            region.graph_breaks += sum(counters["graph_break"].values()) - before
