"""The heap alive when a trace starts is frozen for the trace (engine/heap.py), and only then.
(The permanent generation's count drops by the frozen objects that die meanwhile.)"""

from __future__ import annotations

import gc

from memlens import Tracer


def test_a_trace_freezes_the_heap_it_starts_with_and_lets_go_after():
    assert gc.get_freeze_count() == 0
    with Tracer("cpu", iterations=1):
        assert gc.get_freeze_count() > 1000  # torch's modules and more
    assert gc.get_freeze_count() == 0


def test_a_heap_the_process_froze_itself_stays_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with Tracer("cpu", iterations=1):
            pass
        assert gc.get_freeze_count() > frozen - 100  # not unfrozen by the trace
    finally:
        gc.unfreeze()
