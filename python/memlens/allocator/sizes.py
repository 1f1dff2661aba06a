"""How big a block and a segment are for a request (DeviceCachingAllocator::round_size,
roundup_power2_next_division and get_allocation_size in c10/cuda/CUDACachingAllocator.cpp), and
c10's `format_size` for messages."""

from __future__ import annotations

from .config import AllocatorConfig

MIN_BLOCK_SIZE = 512  # kMinBlockSize: every block is a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to 1 MiB use the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segments (and expandable small pages)
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: below this, large requests share big segments
ROUND_LARGE = 2 << 20  # kRoundLarge: bigger requests get a segment rounded to 2 MiB


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round up to the next of `divisions` equal steps between two powers of two.

    1200 with 4 divisions lies between 1024 and 2048, whose steps are 1024, 1280, 1536, 1792:
    the answer is 1280.
    """
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def round_size(nbytes: int, config: AllocatorConfig) -> int:
    """The block size the allocator hands out for a request of `nbytes`."""
    if nbytes < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    divisions = config.divisions_for(nbytes)
    if divisions > 1 and nbytes > MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(nbytes, divisions)
    return -(-nbytes // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE


def allocation_size(size: int, config: AllocatorConfig) -> int:
    """Bytes cudaMalloc'ed for a new segment when no cached block fits a block of `size`."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return config.large_segment_size
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def format_size(nbytes: int) -> str:
    """c10::CachingAllocator::format_size: '1000 bytes', '2.00 MiB', '1.50 GiB'."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1 << 20:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1 << 30:
        return f"{nbytes / (1 << 20):.2f} MiB"
    return f"{nbytes / (1 << 30):.2f} GiB"
