"""The counters of torch.cuda.memory_stats(): c10's Stat (current, peak, allocated, freed) kept
for all memory and separately for the small and the large pool, plus the plain counts.

The nine StatArrays live in four flat lists indexed by `STAT + pool type`, and the updates an
allocation or a free makes come in one call each: replay makes millions of them, and plain list
arithmetic is several times cheaper than a method call per counter. (The _ACTIVE rows stay
unused: see as_dict.)
"""

from __future__ import annotations

ALL, SMALL, LARGE = 0, 1, 2  # pool types, added to a stat's index
_TYPE_NAMES = ("all", "small_pool", "large_pool")

# StatArray members of c10::CachingDeviceAllocator::DeviceStats, in memory_stats() naming.
ARRAY_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
(ALLOCATION, SEGMENT, _ACTIVE, INACTIVE_SPLIT, ALLOCATED_BYTES, RESERVED_BYTES, _ACTIVE_BYTES,
 INACTIVE_SPLIT_BYTES, REQUESTED_BYTES) = range(0, 3 * len(ARRAY_STATS), 3)
_FIELDS = ("current", "peak", "allocated", "freed")


class Stat:
    """One counter outside the arrays (oversize_allocations, oversize_segments)."""

    __slots__ = _FIELDS

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        self.allocated += amount
        if self.current > self.peak:
            self.peak = self.current

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount


class DeviceStats:
    def __init__(self, max_split_size: int) -> None:
        n = 3 * len(ARRAY_STATS)
        self.current = [0] * n
        self.peak = [0] * n
        self.allocated = [0] * n  # cumulative increases
        self.freed = [0] * n  # cumulative decreases
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.max_split_size = max_split_size  # -1: unlimited, as PyTorch reports it

    def increase(self, stat: int, pool_type: int, amount: int) -> None:
        current, peak, allocated = self.current, self.peak, self.allocated
        for i in (stat, stat + pool_type):
            value = current[i] + amount
            current[i] = value
            allocated[i] += amount
            if value > peak[i]:
                peak[i] = value

    def decrease(self, stat: int, pool_type: int, amount: int) -> None:
        current, freed = self.current, self.freed
        for i in (stat, stat + pool_type):
            current[i] -= amount
            freed[i] += amount

    def inactive_split_change(self, pool_type: int, blocks: int, nbytes: int) -> None:
        """Signed change of inactive_split (count) and inactive_split_bytes. Runs on most
        allocations and frees, hence the straight-line code."""
        if blocks:
            self._signed(INACTIVE_SPLIT, INACTIVE_SPLIT + pool_type, blocks)
        if nbytes:
            self._signed(INACTIVE_SPLIT_BYTES, INACTIVE_SPLIT_BYTES + pool_type, nbytes)

    def _signed(self, i: int, j: int, amount: int) -> None:
        current = self.current
        if amount > 0:
            allocated, peak = self.allocated, self.peak
            allocated[i] += amount
            allocated[j] += amount
            value_i = current[i] = current[i] + amount
            value_j = current[j] = current[j] + amount
            if value_i > peak[i]:
                peak[i] = value_i
            if value_j > peak[j]:
                peak[j] = value_j
        else:
            freed = self.freed
            freed[i] -= amount
            freed[j] -= amount
            current[i] += amount
            current[j] += amount

    def block_allocated(self, pool_type: int, size: int, requested: int) -> None:
        """alloc_found_block: allocation +1, allocated_bytes +size, requested_bytes +requested.
        Written out, not looped: it runs once per allocation."""
        current, peak, allocated = self.current, self.peak, self.allocated
        for i in (ALLOCATION, ALLOCATION + pool_type):
            value = current[i] + 1
            current[i] = value
            allocated[i] += 1
            if value > peak[i]:
                peak[i] = value
        for i in (ALLOCATED_BYTES, ALLOCATED_BYTES + pool_type):
            value = current[i] + size
            current[i] = value
            allocated[i] += size
            if value > peak[i]:
                peak[i] = value
        for i in (REQUESTED_BYTES, REQUESTED_BYTES + pool_type):
            value = current[i] + requested
            current[i] = value
            allocated[i] += requested
            if value > peak[i]:
                peak[i] = value

    def block_freed(self, pool_type: int, size: int, requested: int) -> None:
        """free() and free_block() together: the reverse of block_allocated."""
        current, freed = self.current, self.freed
        for i in (ALLOCATION, ALLOCATION + pool_type):
            current[i] -= 1
            freed[i] += 1
        for i in (ALLOCATED_BYTES, ALLOCATED_BYTES + pool_type):
            current[i] -= size
            freed[i] += size
        for i in (REQUESTED_BYTES, REQUESTED_BYTES + pool_type):
            current[i] -= requested
            freed[i] += requested

    def reset_peaks(self) -> None:
        self.peak[:] = self.current
        for stat in (self.oversize_allocations, self.oversize_segments):
            stat.peak = stat.current

    def as_dict(self) -> dict[str, int]:
        """Flat keys as torch.cuda.memory_stats() spells them."""
        out: dict[str, int] = {}
        for s, name in enumerate(ARRAY_STATS):
            # Frees complete at once in this model (no cross-stream events), so a block is
            # active exactly while it is allocated: PyTorch's active stats equal these.
            source = {"active": "allocation", "active_bytes": "allocated_bytes"}.get(name, name)
            index = 3 * ARRAY_STATS.index(source)
            for t, type_name in enumerate(_TYPE_NAMES):
                for field in _FIELDS:
                    out[f"{name}.{type_name}.{field}"] = getattr(self, field)[index + t]
        for name in ("oversize_allocations", "oversize_segments"):
            for field in _FIELDS:
                out[f"{name}.{field}"] = getattr(getattr(self, name), field)
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        out["max_split_size"] = self.max_split_size
        return dict(sorted(out.items()))
