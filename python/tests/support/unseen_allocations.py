"""Find the CPU allocations that dispatch-level accounting cannot see.

Runs a script for real (no fake mode) under torch.profiler with profile_memory=True and a
TorchDispatchMode that wraps every op it sees in a `record_function("unseen::N")` marker and
notes the storages of the op's outputs. In the profiler's event tree, allocation events are
children of the op that made them, so every allocation under marker N that is not an output
storage of op N is memory the kernel allocated for itself: a workspace (freed before the op
returned), or something that outlives the op without being its output (a cache, a leak, an
internal state). Allocations under no marker were made outside any op the mode sees.

    python unseen_allocations.py [--json] [--all] [--detail] [--check] SCRIPT [ARGS...]

Prints one line per unseen allocation (or JSON with --json): the call index, phase, op, the
op's arguments (shapes, dtypes, strides, scalars), the size, and when it was freed. Without
--all, repeated identical findings (same op, arguments and sizes) are printed once with a count.
--detail adds each listed call's full in-op sequence (outputs marked). --check instead asks
memlens' CPU workspace rules (with PYTHONPATH including python/) what each op allocates, on the
same real tensors, and lists the calls whose in-op peak the rules do not reproduce.
"""

from __future__ import annotations

import json
import runpy
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))
from measure_cpu import PhaseMarks, _walk  # noqa: E402

MARK = "unseen::"


def describe(a) -> str:
    if isinstance(a, torch.Tensor):
        s = f"{str(a.dtype).replace('torch.', '')}{list(a.shape)}"
        if not a.is_contiguous():
            s += f"@{list(a.stride())}"
        return s
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(describe(x) for x in a) + "]"
    return repr(a)


@dataclass
class Call:
    index: int
    op: str
    args: str
    phase: str
    backward: bool
    outputs: dict = field(default_factory=dict)  # storage data_ptr -> nbytes
    modelled: tuple | None = None  # (peak, end) in-op bytes the workspace rules predict


@dataclass
class Unseen:
    call: int  # -1: made under no op the mode saw
    op: str
    args: str
    phase: str
    backward: bool
    size: int
    freed: str  # "in op" | "later, in <op> #<call>" | "later, outside ops" | "never"
    parent: str = ""  # the profiler op that made it, for allocations under no marker


class Recorder(TorchDispatchMode):
    def __init__(self, marks: PhaseMarks, rules=None):
        super().__init__()
        self.marks = marks
        self.rules = rules  # a memlens WorkspaceModel to check, or None
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        call = Call(len(self.calls), str(func), describe(list(args))[1:-1] + (
            ", " + ", ".join(f"{k}={describe(v)}" for k, v in kwargs.items()) if kwargs else ""),
            self.marks.phase, torch._C._current_autograd_node() is not None)
        self.calls.append(call)
        inputs = {a.untyped_storage().data_ptr() for a in args
                  if isinstance(a, torch.Tensor) and a.layout == torch.strided}
        with torch._C._profiler._RecordFunctionFast(f"{MARK}{call.index}"):
            out = func(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else [out]
        new = []
        for t in outs:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                st = t.untyped_storage()
                call.outputs[st.data_ptr()] = st.nbytes()
                fresh = st.data_ptr() not in inputs and st.data_ptr() not in [p for p, _ in new]
                new.append((st.data_ptr(), st.nbytes() if fresh else 0))
            else:
                new.append((None, 0))
        if self.rules is not None:
            call.modelled = simulate(self.rules(func, args, kwargs, out), [n for _, n in new])
        return out


def simulate(plan, sizes: list[int]) -> tuple[int, int]:
    """(peak, end) bytes an op allocates by the rules' plan, as memlens' accountant books it."""
    named = plan.named_outputs() if plan is not None else set()
    current = sum(n for i, n in enumerate(sizes) if i not in named)
    peak, held = current, {}
    for step in plan.steps if plan is not None else []:
        if step[0] == "alloc":
            held[step[1]] = step[2]
            current += step[2]
        elif step[0] == "free":
            current -= held.pop(step[1], 0)
        else:
            current += sum(sizes[i] for i in step[1] if i < len(sizes))
        peak = max(peak, current)
    return peak, current - sum(held.values())


class NamedMarks(PhaseMarks):
    """measure_cpu's phase marks, also remembering the current phase's name."""

    phase = "setup_model_and_optimizer"

    def begin(self, name: str) -> None:
        self.phase = name
        super().begin(name)


@dataclass
class Trace:
    calls: list[Call]
    # (time, signed size, ptr, innermost marker call or -1, innermost profiler op name)
    events: list[tuple[int, int, int, int, str]]
    free_of: dict[int, int]  # index of an allocation event -> index of its free event


def record(script: str, argv: list[str], rules=None) -> Trace:
    """Run a script (as `python script ARGS` would) and trace it."""

    def run() -> None:
        sys.argv = [script, *argv]
        runpy.run_path(script, run_name="__main__")

    return record_callable(run, rules)


def record_callable(fn, rules=None) -> Trace:
    """Run `fn()` and trace it; with `rules` (a memlens WorkspaceModel), also note what they
    predict for each op (they read shapes, dtypes and strides, which real tensors have too)."""
    from torch._C._profiler import _EventType
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    marks = NamedMarks()
    recorder = Recorder(marks, rules)
    handles = [m.register_module_forward_pre_hook(marks.pre_forward),
               m.register_module_forward_hook(marks.post_forward, always_call=True),
               o.register_optimizer_step_pre_hook(marks.pre_step)]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        marks.begin("setup_model_and_optimizer")
        with recorder:
            fn()
        marks.end()
    for h in handles:
        h.remove()

    events = []

    def visit(e, call: int, parent: str) -> None:
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            events.append((e.start_time_ns, f.alloc_size, f.ptr, call, parent))
            return
        if e.name.startswith(MARK):
            call, parent = int(e.name[len(MARK):]), ""
        elif e.tag == _EventType.TorchOp:
            parent = e.name
        for c in e.children:
            visit(c, call, parent)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        visit(root, -1, "")
    events.sort(key=lambda ev: ev[0])
    # Pair each allocation with its free (same pointer, next free in time).
    free_of: dict[int, int] = {}
    open_: dict[int, int] = {}
    for i, (_, size, ptr, _, _) in enumerate(events):
        if size > 0:
            open_[ptr] = i
        elif ptr in open_:
            free_of[open_.pop(ptr)] = i
    return Trace(recorder.calls, events, free_of)


def is_output(trace: Trace, i: int) -> bool:
    """An allocation is an op's output if it is a storage the op returned and the op did not
    free it first (malloc may hand a freed workspace's address straight to the output)."""
    _, _, ptr, call, _ = trace.events[i]
    j = trace.free_of.get(i)
    return call >= 0 and ptr in trace.calls[call].outputs and (
        j is None or trace.events[j][3] != call)


def unseen(trace: Trace) -> list[Unseen]:
    calls, events = trace.calls, trace.events
    found: list[Unseen] = []
    for i, (_, size, ptr, call, parent) in enumerate(events):
        if size <= 0 or is_output(trace, i):
            continue
        j = trace.free_of.get(i)
        freed_by = events[j][3] if j is not None else None
        c = calls[call] if call >= 0 else None
        if j is None:
            freed = "never"
        elif freed_by == call and call >= 0:
            freed = "in op"
        elif freed_by >= 0:
            freed = f"later, in {calls[freed_by].op} #{freed_by}"
        else:
            freed = f"later, under {events[j][4] or 'no op'}"
        found.append(Unseen(call, c.op if c else "", c.args if c else "", c.phase if c else "",
                            c.backward if c else False, size, freed, parent))
    return found


def detail(trace: Trace, call: int) -> list[str]:
    """Every allocation and free inside one call, in order, with the bytes the call holds."""
    lines, held = [], 0
    for i, (_, size, ptr, c, parent) in enumerate(trace.events):
        if c != call:
            continue
        held += size
        kind = "output" if size > 0 and is_output(trace, i) else ""
        lines.append(f"    {size:>+12,} B  held {held:>11,}  {parent:<32} {kind}")
    return lines


def in_op(trace: Trace, call: int) -> tuple[int, int]:
    """(peak, end) bytes the allocator saw inside one call, outputs included."""
    current = peak = 0
    for _, size, _, c, _ in trace.events:
        if c == call:
            current += size
            peak = max(peak, current)
    return peak, current


def check(trace: Trace) -> list[tuple[int, Call, tuple, tuple]]:
    """Calls whose real in-op peak differs from the rules' (count, first call, real, modelled),
    identical findings once."""
    seen: dict = {}
    for c in trace.calls:
        if c.modelled is None:
            continue
        real = in_op(trace, c.index)
        if real[0] != c.modelled[0]:
            key = (c.op, c.args, real, c.modelled)
            n, first = seen.get(key, (0, c))
            seen[key] = (n + 1, first)
    return [(n, c, k[2], k[3]) for k, (n, c) in seen.items()]


def collect(script: str, argv: list[str]) -> tuple[list[Unseen], list[Call]]:
    trace = record(script, argv)
    return unseen(trace), trace.calls


def summarize(found: list[Unseen]) -> list[tuple[int, Unseen]]:
    """Identical findings (op, args, size, freed-in-op-ness) once each, with their count."""
    counts: Counter = Counter()
    first: dict = {}
    for u in found:
        key = (u.op, u.args, u.size, u.freed == "in op", u.backward, u.parent)
        counts[key] += 1
        first.setdefault(key, u)
    return [(counts[k], first[k]) for k in first]


def main(argv: list[str]) -> None:
    opts = {"--json": False, "--all": False, "--detail": False, "--check": False}
    while argv and argv[0] in opts:
        opts[argv.pop(0)] = True
    rules = None
    if opts["--check"]:
        from memlens.kernels.buffers import WorkspaceModel

        rules = WorkspaceModel("cpu")
    trace = record(argv[0], argv[1:], rules)
    found = unseen(trace)
    if opts["--json"]:
        print(json.dumps({"calls": len(trace.calls), "unseen": [asdict(u) for u in found]}))
        return
    if opts["--check"]:
        wrong = check(trace)
        print(f"{len(trace.calls)} ops seen; {sum(n for n, *_ in wrong)} whose in-op peak the "
              "workspace rules do not reproduce (real vs rules, (peak, end) bytes):")
        for n, c, real, model in wrong:
            print(f"  x{n:<3} #{c.index} {c.op}({c.args})  real {real}  rules {model}")
        return
    rows = [(1, u) for u in found] if opts["--all"] else summarize(found)
    print(f"{len(trace.calls)} ops seen; {len(found)} allocations that are no op's output")
    for n, u in rows:
        where = f"#{u.call} {u.op}" if u.call >= 0 else f"(no op seen; under {u.parent or '-'})"
        print(f"{u.size:>10,} B  x{n:<3} {u.phase:<26} {'bw' if u.backward else 'fw'}  {where}"
              f"({u.args})  freed {u.freed}  [{u.parent}]")
    if opts["--detail"]:
        print("\nEvery allocation inside each op call listed above:")
        for u in dict.fromkeys(u.call for _, u in rows if u.call >= 0):
            c = trace.calls[u]
            print(f"#{c.index} {c.op}({c.args})")
            print("\n".join(detail(trace, c.index)))


if __name__ == "__main__":
    main(sys.argv[1:])
