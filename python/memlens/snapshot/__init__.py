"""The snapshot: a versioned JSON document, the contract between the engine and its readers.

Its names are imported when first used: the language server imports `snapshot.digest` and
must not import torch, which the builder's modules do."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"FORMAT": "build", "VERSION": "build", "build_snapshot": "build",
          "read_snapshot": "io", "validate_snapshot": "io", "write_snapshot": "io"}

__all__ = ["FORMAT", "VERSION", "build_snapshot", "read_snapshot", "validate_snapshot",
           "write_snapshot"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
