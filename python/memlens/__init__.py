"""Torch Memory Lens: how much device memory one training step needs, and where the bytes go.

    import memlens
    memlens.prepare("h100-80gb")  # before `import torch`: a GPU target on a machine without one
    import torch
    with memlens.Tracer("h100-80gb") as tracer:
        ...  # build a model and run training steps, as on the GPU
    memlens.print_report(tracer.snapshot())

Importing memlens does not import torch (the language server never does); the names below are
loaded on first use.
"""

__version__ = "0.1.0"

_LAZY = {
    "prepare": ("memlens.targets.session", "prepare_process"),
    "Tracer": ("memlens.engine.tracer", "Tracer"),
    "get_device": ("memlens.devices", "get_device"),
    "read_snapshot": ("memlens.snapshot", "read_snapshot"),
    "write_snapshot": ("memlens.snapshot", "write_snapshot"),
    "print_report": ("memlens.reports.terminal", "print_report_to_terminal"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'memlens' has no attribute {name!r}")
