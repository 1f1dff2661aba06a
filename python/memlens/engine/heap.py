"""The objects alive when a trace starts, and when its step starts, kept out of the garbage
collector's way.

A trace starts with hundreds of thousands of objects alive (torch, transformers and the
libraries a script imports; a model built before the trace). None of them becomes garbage
during the trace, yet each of Python's full collections walks them all: in a Llama-7B step
with layer replay one full collection was 0.17 s, an eighth of the trace. `gc.freeze()` moves
them to the permanent generation, which collections skip; the objects the trace makes are
collected as before (young generations at the same counts, so tensors in reference cycles are
freed when they would have been). Undone at the end of the trace. A process that froze its
heap itself (the warm worker, before it forks: cli/fork_server.py) is left as it is.

The heap is frozen once more at the first top-level forward, after a collection of the young
generations: what the script imported and built before its step (transformers' modules, the
model) is the bulk of what is left, and the trace ends with a full collection
(`at_end`), which then walks only what the step made (a Llama-7B step: 22,000 objects
and 7 ms, against 254,000 and 0.21 s). That second freeze is undone with the first; where the
process froze its heap itself it is made only if the process ends with the trace
(`process_ends_with_the_trace`: the CLI's trace, cold or forked from the warm worker), so that
no object of a user's own process stays frozen after a trace made through the Python API.

In a process that froze its heap itself, the trace starts with a collection of what is not
frozen: the collector's counts then start from zero, so the trace's collections come at the
same points in every run (a forked child inherits its parent's counts).
"""

from __future__ import annotations

import gc

_ONE_TRACE_PROCESS = False


def process_ends_with_the_trace() -> None:
    """This process ends after its one trace: what a trace freezes need not be unfrozen."""
    global _ONE_TRACE_PROCESS
    _ONE_TRACE_PROCESS = True


class FrozenHeap:
    """A trace's context: the heap frozen at its start (and `at_first_forward`), unfrozen at
    its end if the trace froze it."""

    def __init__(self) -> None:
        self._owned = False
        self._step_frozen = False

    def __enter__(self) -> "FrozenHeap":
        if not gc.get_freeze_count():
            gc.freeze()
            self._owned = True
        else:
            # A child forked from the warm worker inherits the worker's collector counts,
            # which differ with every request it served: when the trace's full collections
            # come (and which reference cycles they free) would differ from trace to trace.
            # A collection starts them from zero; it walks only what is not frozen.
            gc.collect()
        return self

    def __exit__(self, *exc) -> None:
        if self._owned:
            gc.unfreeze()
            self._owned = False

    def at_end(self) -> None:
        """Garbage in reference cycles (a schedule's closures, autograd graphs that point back
        at their outputs) is freed whenever the collector happens to run, which differs from
        run to run: collected now, what the trace ends with is what the workload still
        reaches, the same every time."""
        gc.collect()

    def at_first_forward(self) -> None:
        if self._step_frozen:
            return
        self._step_frozen = True
        if self._owned or _ONE_TRACE_PROCESS:
            gc.collect(1)  # young garbage (what building the model dropped) is not kept
            gc.freeze()
