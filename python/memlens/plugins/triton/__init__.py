"""Hand-written Triton kernels launched on fake tensors (TRL's chunked log-prob kernels, Liger,
a user's `@triton.jit` function).

Activated when `triton` is imported inside a trace; undone when the trace ends.

A launch (`kernel[grid](...)`: `JITFunction.run`; through `@triton.autotune`: `Autotuner.run`)
would first ask Triton's driver for the current device, which looks for libcuda on a machine
without a GPU ("libcuda.so cannot found!"), then compile and run the kernel. A Triton kernel
allocates no device memory of its own: it reads and writes the tensors it is handed, which
the script allocated with torch (booked by the accountant). So a launch whose tensor arguments
are fake is not run (nothing is written; values are placeholders in a trace anyway) and a
note names the kernel. Autotuning, which times real launches, is not run either: the first
of the kernel's configurations is launched, that is, skipped. Launches on real tensors are left
to Triton. Inductor's own kernels never get here (patches/torch_inductor_cuda.py).
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch
from torch._subclasses.fake_tensor import FakeTensor

from ...patches.patcher import check_tested
from ..context import PluginContext
from ..imports import ImportWatcher
from ..library_plugin import LibraryPlugin


class Plugin(LibraryPlugin):
    watches = {"triton.runtime.jit": "jit", "triton.runtime.autotuner": "autotuner"}

    def __init__(self, tracer: PluginContext, watcher: ImportWatcher) -> None:
        self.launches: dict[str, int] = {}
        super().__init__(tracer, watcher)

    def deactivate(self) -> None:
        super().deactivate()
        self.launches.clear()

    def jit(self, mod: ModuleType) -> None:
        _check_version()
        self._skip_fake_launches(mod.JITFunction)

    def autotuner(self, mod: ModuleType) -> None:
        _check_version()
        for name in ("Autotuner", "Heuristics"):
            cls = getattr(mod, name, None)
            if cls is not None:
                self._skip_fake_launches(cls)

    def _skip_fake_launches(self, cls: type) -> None:
        original = cls.__dict__["run"]

        @functools.wraps(original)
        def run(kernel, *args, __original=original, **kwargs):
            if not _has_fake_tensor(args, kwargs):
                return __original(kernel, *args, **kwargs)
            self._noted(_kernel_name(kernel))
            return None

        self.patcher.setattr(cls, "run", run)

    def _noted(self, name: str) -> None:
        before = self.launches.get(name, 0)
        self.launches[name] = before + 1
        text = (f"triton: kernel {name} was launched on fake tensors and not run (it writes "
                "into the tensors it is given and allocates no device memory of its own)")
        if before == 0:
            self.tracer.add_note(text)


def _has_fake_tensor(args, kwargs) -> bool:
    return any(isinstance(a, FakeTensor) for a in (*args, *kwargs.values())) or any(
        isinstance(a, torch.Tensor) and isinstance(getattr(a, "_local_tensor", None), FakeTensor)
        for a in (*args, *kwargs.values()))


def _kernel_name(kernel) -> str:
    fn = kernel
    while hasattr(fn, "fn") and not callable(getattr(fn, "__wrapped__", None)):
        fn = fn.fn  # Autotuner / Heuristics wrap a JITFunction
        if not hasattr(fn, "fn"):
            break
    python = getattr(fn, "fn", fn)
    module = getattr(python, "__module__", "")
    name = getattr(python, "__qualname__", getattr(python, "__name__", repr(python)))
    return f"{module}.{name}" if module else name


def _check_version() -> None:
    from importlib.metadata import version  # the package may still be importing

    check_tested("triton", version("triton"))
