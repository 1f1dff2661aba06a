"""`torch.compile` and `nn.Module.compile` run the code eagerly, with a note.

Under the tracer's dispatch modes dynamo cannot compile: plain `torch.compile` silently falls
back to eager and `fullgraph=True` fails ("non-infra torch dispatch mode present"). Until
compiled memory is modelled, every compiled region runs eagerly on purpose, and the report says
where (the file:line of the compile call), so that nobody reads the eager numbers as those of
the compiled program. A compiled module is returned as is (its names stay those of the model,
without `_orig_mod.`); a compiled function is wrapped so that its note appears only if it runs
(libraries compile helpers at import that a script may never call).
"""

from __future__ import annotations

import functools
import sys

import torch

from .patcher import Patcher, check_tested

def note_text(place: str, call: str) -> str:
    return (f"{place}: {call} was traced eagerly (memlens does not model compiled code yet); "
            "compiled memory is usually lower, as fused kernels keep fewer intermediate tensors")


def _call(name: str, target: str | None, kwargs: dict) -> str:
    """How the call reads: torch.compile(GPT, mode='max-autotune')."""
    args = [target] if target else []
    args += [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(args)})"


def _place(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def apply(patcher: Patcher, add_note) -> None:
    check_tested("torch_compile", torch.__version__)

    def eager(target, place: str, kwargs: dict):
        if isinstance(target, torch.nn.Module):
            add_note(note_text(place, _call("torch.compile", type(target).__name__, kwargs)))
            return target
        call = _call("torch.compile", getattr(target, "__name__", "fn"), kwargs)
        noted = False

        @functools.wraps(target)
        def compiled(*args, **kwargs):
            nonlocal noted
            if not noted:
                noted = True
                add_note(note_text(place, call))
            return target(*args, **kwargs)

        return compiled

    def compile(model=None, **kwargs):
        if kwargs.get("disable"):  # torch.compile(disable=True) is eager already
            return model if model is not None else (lambda fn: fn)
        place = _place(1)
        if model is None:  # @torch.compile(mode=...) on a function or a module
            return lambda target: eager(target, place, kwargs)
        return eager(model, place, kwargs)

    def module_compile(self, *args, **kwargs):
        call = _call(f"{type(self).__name__}.compile", None, kwargs)
        add_note(note_text(_place(1), call))

    patcher.setattr(torch, "compile", compile)
    patcher.setattr(torch.nn.Module, "compile", module_compile)
