"""Pinned (page-locked) host memory on the simulated GPU platform.

On a GPU machine `t.pin_memory()`, `torch.empty(..., pin_memory=True)`, a DataLoader with
`pin_memory=True` and DDP's reducer (its map of used parameters, with `find_unused_parameters`)
take page-locked host memory from CUDA's host allocator. A build without CUDA raises "Pinned
memory requires CUDA" for each. The shim's CUDA hooks (shim.cpp) hand out a host allocator whose
blocks they recognise: a real host tensor pinned here is a real host allocation of its size that
answers `is_pinned()` True, booked on the host (`cpu`) row as the script's host memory.

A fake host tensor (model state offloaded to the host, a pinned buffer too large to make for
real) has no pointer the hooks could know: which fake storages are pinned is kept here, by their
ledger record.

Not modelled: PyTorch's CachingHostAllocator rounds each pinned block up to a power of two and
keeps freed blocks for reuse; the bytes booked are the tensor's own.
"""

from __future__ import annotations

from . import build


def pinning_available() -> bool:
    """Whether real host tensors can be pinned in this process: the shim's hooks, or the CUDA
    build's own (a machine with a GPU, where no shim is loaded)."""
    import torch

    return build.loaded_shim() is not None or torch.cuda._is_compiled()


class PinnedFakeStorages:
    """Which fake host storages a trace made pinned (`_pin_memory`, a factory's
    `pin_memory=True`), by the ledger record of each; the ledger is handed in."""

    def __init__(self, ledger) -> None:
        self._ledger = ledger
        self._rids: set[int] = set()

    def _rid(self, t) -> int | None:
        try:
            return self._ledger.storage_rid(t.untyped_storage())
        except (RuntimeError, NotImplementedError):  # no storage (a subclass's shell)
            return None

    def mark(self, t) -> None:
        rid = self._rid(t)
        if rid is not None and t.device.type == "cpu":  # only host memory is ever pinned
            self._rids.add(rid)

    def is_pinned(self, t) -> bool:
        return self._rid(t) in self._rids
