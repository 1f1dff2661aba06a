"""The server process never imports torch: torch lives in the trace worker. Importing it here
would cost seconds and gigabytes, and on a CPU-only build would make fake CUDA impossible in
anything the server forks. An import hook turns a slip into a clear error instead."""

from __future__ import annotations

import importlib.abc
import sys


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch" or fullname.startswith("torch."):
            raise ImportError(f"the memlens language server does not import {fullname} "
                              "(torch runs in the trace worker only)", name=fullname)
        return None


def forbid_torch() -> None:
    if not any(isinstance(f, _NoTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoTorch())
