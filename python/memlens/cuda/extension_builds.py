"""CUDA extensions a library builds on first use: refused with a message that says what is
missing, never torch's "CUDA_HOME environment variable is not set".

Research code and libraries compile their own CUDA kernels when first asked
(`torch.utils.cpp_extension.load(name, sources=[..., "k.cu"])`, `load_inline(cuda_sources=...)`):
fused activations and optimizers, attention variants, apex's and older Megatron's JIT paths.
A trace runs no kernel and a simulated GPU has no toolkit, so such a build cannot help it; what
torch answers on a CPU build (no CUDA_HOME) or a CUDA build without nvcc names neither the
extension nor what to do. While a CUDA target is traced, a build with CUDA sources (or
`with_cuda=True`) raises a MemlensError naming the extension, the library (and version) that
asked for it, and what memlens would need: a stand-in for its kernels that allocates what they
allocate, as DeepSpeed's op builders have (plugins/deepspeed/op_builders.py). The refusal is
also a note of the trace: a library that falls back to PyTorch ops when its extension does not
build (many do) then still says, in the report, that its fused kernels were not traced.
A C++-only extension builds as usual.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

from ..errors import MemlensError
from ..patches.patcher import Patcher, check_tested

CUDA_SUFFIXES = (".cu", ".cuh")


def refusal(name: str, library: str, call: str) -> str:
    return (f"{library} builds the CUDA extension {name!r} on first use ({call}): a trace runs "
            "no CUDA kernel and has no CUDA toolkit to build one, and memlens has no stand-in "
            "for this extension's kernels, so what they allocate is not traced. Trace a "
            "configuration that does not use it (many libraries fall back to PyTorch ops when "
            "it does not build; the trace then goes on), or report it to memlens: a stand-in "
            "allocates what the kernels allocate")


def caller_library(skip: int = 2) -> str:
    """The library (and its installed version) whose code called the build, or "the script"."""
    from importlib import metadata

    frame = sys._getframe(skip)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        top = module.split(".")[0]
        if top == "__main__":
            return "the script"
        if top and top not in ("torch", "memlens", "functools", "importlib"):
            for dist in metadata.packages_distributions().get(top, []):
                try:
                    return f"{dist} {metadata.version(dist)}"
                except metadata.PackageNotFoundError:
                    continue
            return top
        frame = frame.f_back
    return "the script"


def apply(patcher: Patcher, add_note: Callable[[str], None]) -> None:
    """Called when the script imports torch.utils.cpp_extension (it imports setuptools: about
    0.1 s that a trace building no extension should not pay)."""
    import torch.utils.cpp_extension as cpp_extension

    check_tested("cuda_extension_builds", sys.modules["torch"].__version__)

    def refuse(name: str, call: str) -> MemlensError:
        message = refusal(name, caller_library(3), call)
        add_note(message)
        return MemlensError(message)

    load, load_inline = cpp_extension.load, cpp_extension.load_inline

    @functools.wraps(load)
    def load_refusing_cuda(name, sources, *args, **kwargs):
        paths = [sources] if isinstance(sources, str) else list(sources)
        with_cuda = kwargs.get("with_cuda")
        if with_cuda or (with_cuda is None and any(str(p).endswith(CUDA_SUFFIXES) for p in paths)):
            raise refuse(name, "torch.utils.cpp_extension.load")
        return load(name, sources, *args, **kwargs)

    @functools.wraps(load_inline)
    def load_inline_refusing_cuda(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        if cuda_sources or kwargs.get("with_cuda"):
            raise refuse(name, "torch.utils.cpp_extension.load_inline")
        return load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)

    patcher.setattr(cpp_extension, "load", load_refusing_cuda)
    patcher.setattr(cpp_extension, "load_inline", load_inline_refusing_cuda)
