"""A model of PyTorch's CUDA caching allocator, in pure Python (no torch needed).

It turns the ledger's allocation events into what `torch.cuda.memory_reserved()` would show:
segments, cached blocks, fragmentation, OOMs. `outside` lists the device memory the allocator
never sees (CUDA context, NCCL buffers) and the library workspaces it does.
"""

from .caching import AllocResult, CachingAllocatorModel
from .config import AllocatorConfig, AllocatorConfigError, parse_alloc_conf
from .oom import OomInfo
from .outside import (OutsideItem, cublas_workspace_bytes, cublas_workspace_items,
                      cuda_context_items, cudnn_workspace_items)
from .replay import ReplayResult, replay
from .sizes import allocation_size, format_size, round_size
from .snapshot import memory_snapshot

__all__ = [
    "AllocResult", "AllocatorConfig", "AllocatorConfigError", "CachingAllocatorModel",
    "OomInfo", "OutsideItem", "ReplayResult", "allocation_size", "cublas_workspace_bytes",
    "cublas_workspace_items", "cuda_context_items", "cudnn_workspace_items", "format_size",
    "memory_snapshot", "parse_alloc_conf", "replay", "round_size",
]
