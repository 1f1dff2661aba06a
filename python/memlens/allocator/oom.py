"""What an allocation that does not fit reports: the numbers, and PyTorch's message for them
(the TORCH_CHECK_WITH(OutOfMemoryError, ...) at the end of DeviceCachingAllocator::malloc)."""

from __future__ import annotations

from dataclasses import dataclass

from .sizes import format_size

ONE_EXABYTE = 1 << 60  # CUDACachingAllocator::allocate refuses these before trying


@dataclass(frozen=True, slots=True)
class OomInfo:
    requested: int  # bytes the caller asked for
    size: int  # the rounded block size
    alloc_size: int  # the segment PyTorch would have cudaMalloc'ed: its "Tried to allocate"
    allocated: int  # allocated bytes at the failure, after the cache was released
    reserved: int  # reserved bytes at the failure
    device_total: int  # the card's capacity, as the message states it
    device_free: int  # what cudaMalloc could still take
    message: str


def oom_message(alloc_size: int, device: int, device_total: int, device_free: int,
                allocated: int, reserved: int, allowed: int | None) -> str:
    """PyTorch's text, minus the NVML per-process line (no driver to ask here)."""
    allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
    return (
        f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU {device} has a "
        f"total capacity of {format_size(device_total)} of which {format_size(device_free)} is "
        f"free. {allowed_info}Of the allocated memory {format_size(allocated)} is allocated by "
        f"PyTorch, and {format_size(reserved - allocated)} is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/"
        "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )


def exabyte_oom(nbytes: int, allocated: int, reserved: int, capacity: int,
                free: int) -> OomInfo:
    return OomInfo(nbytes, 0, 0, allocated, reserved, capacity, free,
                   "CUDA out of memory. Tried to allocate more than 1EB memory.")
