"""Hugging Face accelerate (and the Trainer, which runs on it) on a simulated rank.

Activated when `accelerate` is imported inside a trace; patched right after its submodule has
run, undone when the trace ends.

- `accelerate.utils.random.synchronize_rng_state`: at each epoch a prepared DataLoader
  broadcasts rank 0's sampler and RNG states to every rank (through the GPU, then back with
  `.cpu()`) and loads what it receives into the generator. On a simulated rank the broadcast
  moves no data, so what comes back is a fake tensor that no generator can load. Every rank of a
  simulated job is this process, so rank 0's state is already its own: the synchronisation is
  skipped (a note says so). A single process has nothing to synchronise either way.
- `accelerate.utils.operations.pad_across_processes` (evaluation: the Trainer pads logits and
  labels before gathering them): it gathers every rank's sizes as a tensor and pads to the
  largest, a size read out of tensor values a trace does not have. Every rank of a simulated
  job is this process and holds its sizes, so the largest is this rank's own and there is
  nothing to pad: the data comes back as it is, as a real run would return it.
- `Accelerator._prepare_fsdp2`: it swaps the optimizer's parameters for the sharded ones by
  their `data_ptr()`, which is 0 for every fake tensor (plus its offset): every parameter would
  map to the same sharded one and the optimizer would step one tensor, silently. During the
  call a fake tensor's `data_ptr()` is an address unique to its storage (the storage's
  identity plus the offset), as a real one is; torch's `Tensor.__deepcopy__`, which reads it
  to pick a fake tensor's clone path (0), still gets 0.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin




@contextlib.contextmanager
def _unique_fake_data_ptrs():
    from torch._subclasses.fake_tensor import FakeTensor

    original = FakeTensor.__dict__.get("data_ptr")

    def data_ptr(self):
        if sys._getframe(1).f_code.co_name == "__deepcopy__":
            return 0
        return self.untyped_storage()._cdata + self.storage_offset() * self.element_size()

    FakeTensor.data_ptr = data_ptr
    try:
        yield
    finally:
        if original is None:
            del FakeTensor.data_ptr
        else:
            FakeTensor.data_ptr = original


class Plugin(LibraryPlugin):
    watches = {"accelerate.utils.random": "random", "accelerate.utils.operations": "operations",
               "accelerate.accelerator": "accelerator"}

    def accelerator(self, mod: ModuleType) -> None:
        _check_version()
        original = mod.Accelerator._prepare_fsdp2

        @functools.wraps(original)
        def _prepare_fsdp2(self, *args):
            with _unique_fake_data_ptrs():
                return original(self, *args)

        self.patcher.setattr(mod.Accelerator, "_prepare_fsdp2", _prepare_fsdp2)

    def operations(self, mod: ModuleType) -> None:
        _check_version()
        original = mod.pad_across_processes

        @functools.wraps(original)
        def pad_across_processes(tensor, dim=0, pad_index=0, pad_first=False):
            return tensor

        self.patcher.setattr(mod, "pad_across_processes", pad_across_processes)

    def random(self, mod: ModuleType) -> None:
        if self.tracer.rank is None:
            return
        _check_version()
        original = mod.synchronize_rng_state
        notes = self.tracer.notes
        note = ("accelerate: RNG states are not broadcast from rank 0 (every rank of the "
                "simulated job is this process)")

        @functools.wraps(original)
        def synchronize_rng_state(rng_type=None, generator=None):
            if note not in notes:
                notes.append(note)

        self.patcher.setattr(mod, "synchronize_rng_state", synchronize_rng_state)


def _check_version() -> None:
    import accelerate

    check_tested("hf_accelerate", accelerate.__version__)
