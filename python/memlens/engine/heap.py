"""The objects alive when a trace starts, kept out of the garbage collector's way.

A trace starts with hundreds of thousands of objects alive (torch, transformers and the
libraries a script imports; a model built before the trace). None of them becomes garbage
during the trace, yet each of Python's full collections walks them all: in a Llama-7B step
with layer replay one full collection was 0.17 s, an eighth of the trace. `gc.freeze()` moves
them to the permanent generation, which collections skip; the objects the trace makes are
collected as before (young generations at the same counts, so tensors in reference cycles are
freed when they would have been). Undone at the end of the trace. A process that froze its
heap itself (the warm worker, before it forks: cli/fork_server.py) is left as it is.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def frozen_before_trace() -> Iterator[None]:
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
