"""Ground truth for the CPU target: run a training script for real and measure, from the CPU
allocator's own records (torch.profiler memory events), the peak and each phase's peak.

Independent of memlens' ledger: only the phase boundaries follow the same rules (the first
top-level module forward, optimizer.step()), marked as `record_function` ranges.

    python measure_cpu.py SCRIPT [ARGS...]   -> one JSON object on stdout
"""

from __future__ import annotations

import json
import runpy
import sys

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile


class PhaseMarks:
    def __init__(self) -> None:
        self.range = None
        self.state = "setup"
        self.iteration = 0
        self.depth = 0

    def begin(self, name: str) -> None:
        if self.range is not None:
            self.range.__exit__(None, None, None)
        self.range = record_function(f"phase::{name}")
        self.range.__enter__()

    def pre_forward(self, module, args):
        if torch.compiler.is_compiling():  # inside a compiled region: one call (as memlens)
            return
        if self.depth == 0 and torch._C._current_autograd_node() is None:
            if self.state == "optimizer":
                self.iteration += 1
            if self.state != "fwbw":
                self.state = "fwbw"
                self.begin(f"forward_backward_iter_{self.iteration}")
        self.depth += 1

    def post_forward(self, module, args, output):
        if not torch.compiler.is_compiling():
            self.depth -= 1

    def pre_step(self, *a):
        if self.state != "optimizer":
            self.state = "optimizer"
            self.begin(f"optimizer_step_iter_{self.iteration}")

    def end(self):
        if self.range is not None:
            self.range.__exit__(None, None, None)


def walk(events):
    """Every event of the profiler's tree, children included."""
    stack = list(events)
    while stack:
        e = stack.pop()
        yield e
        stack.extend(e.children)


def measure(script: str, argv: list[str]) -> dict:
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    marks = PhaseMarks()
    handles = [m.register_module_forward_pre_hook(marks.pre_forward),
               m.register_module_forward_hook(marks.post_forward, always_call=True),
               o.register_optimizer_step_pre_hook(marks.pre_step)]
    sys.argv = [script, *argv]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        marks.begin("setup_model_and_optimizer")
        runpy.run_path(script, run_name="__main__")
        marks.end()
    for h in handles:
        h.remove()

    from torch._C._profiler import _EventType

    allocs, ranges = [], []
    for e in walk(prof.profiler.kineto_results.experimental_event_tree()):
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            allocs.append((e.start_time_ns, f.alloc_size, f.total_allocated))
        elif e.name.startswith("phase::"):
            ranges.append((e.start_time_ns, e.end_time_ns, e.name[len("phase::"):]))
    allocs.sort(key=lambda a: a[0])
    ranges.sort()
    # The allocator's running total is process-wide: count from what was there before the first
    # allocation of the run.
    base = allocs[0][2] - allocs[0][1] if allocs else 0
    current = [a[2] - base for a in allocs]
    phases = []
    for start, end, name in ranges:
        inside = [c for (t, _, _), c in zip(allocs, current) if start <= t <= end]
        before = [c for (t, _, _), c in zip(allocs, current) if t < start]
        after = [c for (t, _, _), c in zip(allocs, current) if t <= end]
        cur_before = before[-1] if before else 0
        phases.append({"name": name, "peak_bytes": max(inside + [cur_before]),
                       "current_before_bytes": cur_before,
                       "current_after_bytes": after[-1] if after else 0})
    return {"peak_bytes": max(current, default=0), "phases": phases,
            "final_bytes": current[-1] if current else 0, "allocations": len(allocs)}


if __name__ == "__main__":
    result = measure(sys.argv[1], sys.argv[2:])
    print(json.dumps(result))
