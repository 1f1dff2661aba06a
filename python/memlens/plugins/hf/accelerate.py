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
"""

from __future__ import annotations

import functools
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin




class Plugin(LibraryPlugin):
    watches = {"accelerate.utils.random": "random", "accelerate.utils.operations": "operations"}

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
