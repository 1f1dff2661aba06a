"""Inductor's CUDA code generation on a simulated GPU: no GPU, no CUDA build, Triton installed.

Inductor lowers, schedules (fuses) and writes its GPU wrapper code in Python; only building and
launching the Triton kernels needs a GPU. For the trace:
- Dynamo's CUDA device interface (`CudaInterface`) asks the simulated `torch.cuda` (its methods
  were bound to the real functions at import, which would initialise CUDA);
- Triton's target is the simulated GPU's compute capability (Triton's own driver would look
  for libcuda), for the kernels' metadata and cache keys;
- a Triton kernel is never compiled: its launch writes nothing into buffers the wrapper
  allocated (`empty_strided_cuda`, fake tensors the accountant books, as on the CPU target);
  the wrapper's current raw stream is stream 0;
- what measures real kernels is off: autotuning, coordinate descent, `pad_mm`'s benchmarks
  (shape padding), cudagraphs unless a region's mode asks for them (then Inductor's CUDA
  graph trees are cuda/graph_trees.py's model); and constant folding, which computes values
  on the device.
  Inductor then picks what it picks without benchmarks (its heuristics: extern mm, its kernel
  configs), as a `torch.compile` in the default mode does.

Applied on a CUDA target when Triton can be imported (see `triton_missing`).
"""

from __future__ import annotations

import torch

from .patcher import Patcher, check_tested, check_version

_DELEGATED = ("current_device", "set_device", "device_count", "get_device_properties",
              "synchronize", "current_stream", "set_stream", "is_bf16_supported",
              "memory_allocated")


class _NoKernel:
    """A Triton kernel that is never built: its launch (`.run`, or a call) writes nothing."""

    def __init__(self, name: str):
        self.name = name

    def run(self, *args, **kwargs) -> None:
        return None

    def __call__(self, *args, **kwargs) -> None:
        return None


def triton_missing() -> str:
    """Why Inductor's GPU path cannot run here, or "" when Triton is installed. Looked up, not
    imported: importing Triton costs every CUDA trace half a second, and only a compiling one
    needs it (apply imports it)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (no module named 'triton'); install triton==3.8.0"
    return ""


def triton_import_problem() -> str:
    """Why Triton, installed, cannot be imported ("" when it can): asked at the first compile."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return f"Triton is not installed ({e}); install triton==3.8.0"
    return ""


def _delegate(name: str):
    return staticmethod(lambda *args, **kwargs: getattr(torch.cuda, name)(*args, **kwargs))


def apply(patcher: Patcher, made_fake, capability: tuple[int, int], clear_cublas) -> None:
    """`made_fake`: the accountant's context in which every new tensor is fake.
    `capability`: the simulated GPU's (major, minor). `clear_cublas`: frees every cuBLAS
    workspace (torch._C._cuda_clearCublasWorkspaces), for the CUDA graph trees."""
    check_tested("torch_inductor_cuda", torch.__version__)
    import triton
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton
    from torch._dynamo.device_interface import CudaInterface
    from torch._inductor.async_compile import AsyncCompile
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    check_version("triton", triton.__version__, ("3.8.0", "3.10.0"))
    for name in _DELEGATED:
        patcher.setattr(CudaInterface, name, _delegate(name))
    patcher.setattr(CudaInterface, "exchange_device", _delegate("_exchange_device"))
    patcher.setattr(CudaInterface, "maybe_exchange_device", _delegate("_maybe_exchange_device"))
    patcher.setattr(CudaInterface, "get_raw_stream", staticmethod(lambda index=None: 0))
    patcher.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index=None: 0)

    major, minor = capability
    target = GPUTarget("cuda", major * 10 + minor, 32)
    patcher.setattr(torch_triton, "triton_backend", lambda: make_backend(target))
    patcher.setattr(AsyncCompile, "triton",
                    lambda self, kernel_name, source_code, device_str="cuda": _NoKernel(kernel_name))

    def empty_strided_cuda(size, stride, dtype):
        with made_fake():
            return torch.empty_strided(size, stride, dtype=dtype, device="cuda")

    patcher.setattr(torch._C._dynamo.guards, "_empty_strided_cuda", empty_strided_cuda)

    for name in ("max_autotune", "max_autotune_pointwise", "max_autotune_gemm",
                 "coordinate_descent_tuning", "benchmark_kernel", "shape_padding",
                 "joint_graph_constant_folding"):
        patcher.set_config(inductor_config, name, False)
    patcher.set_config(inductor_config.triton, "cudagraphs", False)  # unless a region's mode asks
    _graph_trees(patcher, inductor_config, clear_cublas)
    patcher.set_config(inductor_config, "compile_threads", 1)  # no pool: no kernel is built


def _graph_trees(patcher: Patcher, inductor_config, clear_cublas) -> None:
    """Inductor's CUDA graph trees, for a region whose mode asks for CUDA graphs: its graphs
    are wrapped by the model of the trees (cuda/graph_trees.py) through Inductor's seam for
    that, `config.cudagraph_policy`. Inductor's own trees module cannot be imported from a
    CPU build, so what else reaches it goes to the model: a backward compiled without graphs
    after a graphed forward (`maybe_handle_backward_generation`), and
    `torch.compiler.cudagraph_mark_step_begin`. Without the seam (an older torch) no region
    asks (CompiledPrograms.ask_for_cuda_graphs says so)."""
    if not hasattr(inductor_config, "cudagraph_policy"):
        return
    check_tested("inductor_cudagraph_trees", torch.__version__)
    import torch._inductor.output_code as output_code
    from ..cuda.graph_trees import TREES

    def maybe_handle_backward_generation(compiled_graph, boxed_forward_device_index) -> None:
        if not (compiled_graph.fx_kwargs["is_backward"] and inductor_config.triton.cudagraph_trees):
            return
        run = compiled_graph.current_callable
        device_index = boxed_forward_device_index.value

        def backward(new_inputs):
            TREES.backward_without_graphs(device_index)
            return run(new_inputs)

        compiled_graph.current_callable = backward

    # An object: torch would copy it into each thread that reads it (set_config). A compiled
    # backward runs in the context of the script's `backward()` call, where it is set.
    patcher.setattr(inductor_config, "cudagraph_policy", TREES)
    patcher.setattr(TREES, "clear_cublas", clear_cublas)
    # Inductor graphs only code the caching allocator serves: the simulated one is caching.
    patcher.setattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled", lambda: True)
    patcher.setattr(output_code, "maybe_handle_backward_generation",
                    maybe_handle_backward_generation)
    patcher.setattr(torch.compiler, "cudagraph_mark_step_begin", TREES.mark_step_begin)
    patcher.defer(TREES.clear)
