"""NVTX ranges on a simulated GPU: no-ops, as they are on a GPU when no profiler listens.

Libraries mark their steps with `torch.cuda.nvtx.range_push/pop/mark/range` (DeepSpeed's
ZeRO-3 and its accelerator, Megatron, apex). On a CPU build of torch `torch._C._nvtx` does not
exist and `torch.cuda.nvtx` raises "NVTX functions not installed. Are you sure you have a CUDA
build?", which a user cannot act on. While a CUDA target is traced, `torch.cuda.nvtx._nvtx`
(and `torch._C._nvtx`, for `from torch._C import _nvtx`) is a stand-in that keeps the range
depth the real functions return and records nothing. A CUDA build keeps its own.
"""

from __future__ import annotations

import torch

from .patcher import Patcher, check_tested


class NvtxStandIn:
    """torch._C._nvtx's functions: pushes and pops return the zero-based depth, as NVTX's."""

    def __init__(self) -> None:
        self.depth = 0
        self._next_id = 0

    def rangePushA(self, message: str) -> int:
        self.depth += 1
        return self.depth - 1

    def rangePop(self) -> int:
        if self.depth == 0:
            return -1  # NVTX's answer to a pop without a push
        self.depth -= 1
        return self.depth

    def rangeStartA(self, message: str) -> int:
        self._next_id += 1
        return self._next_id

    def rangeEnd(self, range_id: int) -> None:
        return None

    def markA(self, message: str) -> None:
        return None

    def deviceRangeStart(self, message: str, stream: int = 0) -> object:
        return object()

    def deviceRangeEnd(self, handle: object, stream: int = 0) -> None:
        return None


def apply(patcher: Patcher) -> None:
    if hasattr(torch._C, "_nvtx"):
        return  # a CUDA build: the real (and, without a profiler, free) functions
    check_tested("cuda_nvtx", torch.__version__)
    import torch.cuda.nvtx as nvtx

    stand_in = NvtxStandIn()
    patcher.setattr(torch._C, "_nvtx", stand_in)
    patcher.setattr(nvtx, "_nvtx", stand_in)
