"""Patches of torch that show the tracer a training loop's shape when it has no optimizer step
to go by (hand-written SGD, evaluation loops):

- `torch.optim.Optimizer.__init__`: whether the script made an optimizer at all (then its
  step ends an iteration; without one, a backward pass does).
- `Variable._execution_engine`: every backward pass (`loss.backward()`, `torch.autograd.grad`,
  DDP's and FSDP's own) runs through the autograd engine's `run_backward`; a wrapper around the
  engine says when the outermost one returns. Everything else (`queue_callback`, ...) is the
  engine's own.
"""

from __future__ import annotations

import functools
import threading

import torch

from .patcher import Patcher, check_tested

class _Engine:
    """The autograd engine, reporting the end of each outermost backward pass."""

    def __init__(self, engine, on_backward_end) -> None:
        self._engine = engine
        self._on_backward_end = on_backward_end
        self._depth = 0  # reentrant checkpointing runs a backward inside a backward
        self._lock = threading.Lock()  # CUDA backward runs on the engine's device threads

    def run_backward(self, *args, **kwargs):
        with self._lock:
            self._depth += 1
        try:
            out = self._engine.run_backward(*args, **kwargs)
        finally:
            with self._lock:
                self._depth -= 1
                outermost = self._depth == 0
        if outermost:
            self._on_backward_end()
        return out

    def __getattr__(self, name):
        return getattr(self._engine, name)


def apply(patcher: Patcher, on_optimizer_created, on_backward_end) -> None:
    check_tested("torch_loops", torch.__version__)
    from torch.autograd.variable import Variable
    from torch.optim import Optimizer

    original_init = Optimizer.__init__

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        on_optimizer_created()

    patcher.setattr(Optimizer, "__init__", __init__)
    patcher.setattr(Variable, "_execution_engine",
                    _Engine(Variable._execution_engine, on_backward_end))
