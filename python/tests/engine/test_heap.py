"""The heap alive when a trace starts is frozen for the trace (engine/heap.py), and only then;
what the script built before its step is frozen at the first top-level forward, after a young
collection. (The permanent generation's count drops by the frozen objects that die meanwhile.)"""

from __future__ import annotations

import gc

import torch
from torch import nn

from memlens import Tracer
from memlens.engine import heap


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


class _Cycle:
    def __init__(self, n: int):
        self.tensors = [torch.empty(n) for _ in range(4)]
        self.me = self


def _step(model):
    model(torch.randn(2, 8)).sum().backward()


def test_what_the_step_starts_with_is_frozen_and_young_garbage_collected_first():
    """Built before the step: a model (kept) and a cycle (garbage at the first forward, young):
    the cycle is collected before the freeze, the model's objects are frozen with it, and the
    trace ends with everything unfrozen."""
    assert gc.get_freeze_count() == 0
    gc.disable()  # no collection but memlens' own: the cycle is still there at the forward
    try:
        with Tracer("cpu", iterations=1) as tracer:
            at_start = gc.get_freeze_count()
            model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(50)])
            _Cycle(1024)  # 16 KiB of fp32 in a reference cycle, dropped before the step
            _step(model)
            assert gc.get_freeze_count() > at_start + 50  # the model's modules, at least
            tracer.mark_end()
    finally:
        gc.enable()
    assert gc.get_freeze_count() == 0
    leaked = [r for r in tracer.ledger.records if r.shape == (1024,) and r.free_seq < 0]
    assert leaked == []


def test_the_step_is_frozen_in_a_process_that_froze_itself_only_if_it_ends_with_the_trace(
        monkeypatch):
    gc.freeze()
    try:
        for ends, grows in ((False, False), (True, True)):
            monkeypatch.setattr(heap, "_ONE_TRACE_PROCESS", ends)
            with Tracer("cpu", iterations=1):
                before = gc.get_freeze_count()
                model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(50)])
                _step(model)
                assert (gc.get_freeze_count() > before + 50) == grows, ends
    finally:
        gc.unfreeze()


def test_a_trace_in_a_frozen_process_starts_the_collectors_counts_from_zero():
    """A child forked from the warm worker inherits its counts; the trace resets them."""
    gc.freeze()
    try:
        for _ in range(5):
            gc.collect(0)  # the older generations' counts grow with each young collection
        assert gc.get_count()[1] >= 5
        with heap.FrozenHeap():  # what a trace enters first
            assert gc.get_count()[1:] == (0, 0)
    finally:
        gc.unfreeze()
