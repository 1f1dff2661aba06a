"""Every monkey-patch memlens applies lives in this package: one module per library, each
version-checked and undone when the trace ends."""

from .patcher import Patcher

__all__ = ["Patcher"]
