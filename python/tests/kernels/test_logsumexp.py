"""`logsumexp`'s own allocations (kernels/logsumexp.py), in order, as the CPU allocator records
them: the row maxima, their absolute values, the wrapped `inf` and its cast, a boolean mask,
those freed, a copy the size of the input, the result, then the copy and the maxima freed. A
peak that falls inside the op (FlexAttention's math implementation takes the logsumexp of its
whole scores matrix) depends on that order."""

import json
import subprocess
import sys

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = """
import sys
import torch
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
dims, keepdim = eval(sys.argv[2]), sys.argv[3] == "keep"
x = torch.randn(2, 4, 96, 80, dtype=dtype)
y = torch.logsumexp(x, dims, keepdim=keepdim)
"""

REAL = """
import json, runpy, sys
import torch
from torch.profiler import ProfilerActivity, profile
from torch._C._profiler import _EventType
support, script, *argv = sys.argv[1:]
sys.path.insert(0, support)
from measure_cpu import walk
sys.argv = [script, *argv]
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    runpy.run_path(script, run_name="__main__")
def inside(e):
    while e is not None:
        if e.name == "aten::logsumexp":
            return True
        e = e.parent
    return False
sizes = sorted((e.start_time_ns, e.extra_fields.alloc_size)
               for e in walk(prof.profiler.kineto_results.experimental_event_tree())
               if e.tag == _EventType.Allocation and inside(e.parent))
print(json.dumps([s for _, s in sizes]))
"""


def _traced(snapshot: dict) -> list[int]:
    """The signed sizes of the allocations and frees the trace booked for `logsumexp`."""
    a, ops = snapshot["allocations"], snapshot["ops"]
    events = []
    for i, op in enumerate(a["op"]):
        if ops[op] != "logsumexp":
            continue
        events.append((a["alloc_seq"][i], a["requested_bytes"][i]))
        if a["free_seq"][i] is not None and a["free_seq"][i] >= 0:
            events.append((a["free_seq"][i], -a["requested_bytes"][i]))
    return [n for _, n in sorted(events)]


@pytest.mark.parametrize("dtype, dims, keep", [("fp32", "-1", "drop"), ("fp32", "(0, 2)", "keep"),
                                               ("bf16", "-1", "keep")])
def test_logsumexp_allocates_what_the_cpu_allocator_records(tmp_path, dtype, dims, keep):
    script = tmp_path / "lse.py"
    script.write_text(SCRIPT)
    real_py = tmp_path / "real.py"
    real_py.write_text(REAL)
    real = subprocess.run([sys.executable, str(real_py), str(TESTS / "support"), str(script),
                           dtype, dims, keep],
                          capture_output=True, text=True, timeout=300)
    assert real.returncode == 0, real.stderr[-2000:]
    real_sizes = json.loads(real.stdout.strip().splitlines()[-1])
    out = run_memlens("run", "--device", "cpu", "--progress", "none", "--snapshot",
                      str(tmp_path / "s.json"), "--", str(script), dtype, dims, keep)
    assert out.returncode == 0, out.stderr[-3000:]
    traced = _traced(json.loads((tmp_path / "s.json").read_text()))
    # the result outlives the op: the real run's last events are the copy's and maxima's frees
    assert traced == real_sizes
    assert max(real_sizes) == 2 * 4 * 96 * 80 * (4 if dtype == "fp32" else 2)
