"""Pinned host memory on the simulated GPU platform (cuda/pinned_memory.py, the shim's pinned
allocator): what GPU training code pins is a real host allocation of its size, booked on the
host row, and answers `is_pinned()` True; a fake host tensor pinned answers True too; DDP with
`find_unused_parameters=True` (its reducer pins a map of used parameters) traces.

One trace of scripts/platform/pinned_memory.py as rank 0 of 2 on a simulated H100."""

import json
import re

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in a fresh process

SCRIPT = TESTS / "scripts" / "platform" / "pinned_memory.py"
F32, I64, I32 = 4, 8, 4
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pinned")
    snap = tmp / "pinned.json"
    out = run_memlens("run", "--device", "h100-80gb", "--world-size", "2", "--rank", "0",
                      "--json", "--progress", "none", "--snapshot", str(snap), "--",
                      str(SCRIPT), cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    answers = dict(re.findall(r"^PINNED (\w+) (\w+)$", out.stderr, re.M))
    return answers, json.loads(snap.read_text())


def host_rows(snap: dict) -> list[tuple[str, int]]:
    """(op, bytes) of every allocation on the host row, in order."""
    a = snap["allocations"]
    cpu = a["devices"].index("cpu")
    return [(snap["ops"][a["op"][i]], a["requested_bytes"][i]) for i in range(len(a["bytes"]))
            if a["device"][i] == cpu]


def test_pinned_tensors_answer_is_pinned(traced):
    answers, _ = traced
    assert answers == {"staging": "True", "host": "False", "pinned_copy": "True", "big": "True",
                       "loader": "True", "loader_thread": "True"}


def test_pinned_allocations_are_booked_on_the_host_at_their_size(traced):
    _, snap = traced
    rows = host_rows(snap)
    # In the script's order: torch.empty(256, 1024, pin_memory=True), fp32: 1 MiB; the 512 x
    # 1024 fp32 ones (2 MiB) and its pinned copy (2 MiB); 20 Mi fp32 elements pinned: 80 MiB,
    # over the 64 MiB a host tensor from nothing may take for real, so fake, but booked.
    assert rows[:4] == [("empty", 256 * 1024 * F32), ("ones", 512 * 1024 * F32),
                        ("_pin_memory", 512 * 1024 * F32),
                        ("empty", 20 * 1024 * 1024 * F32)]
    # The DataLoader's first batch in the traced thread (batch 16 of the data set's 1,024
    # features and int64 labels), pinned in place of the collated batch.
    pinned = [n for op, n in rows if op == "_pin_memory"]
    assert pinned == [512 * 1024 * F32, 16 * 1024 * F32, 16 * I64]
    # DDP's reducer with find_unused_parameters: a pinned int32 map, one entry per parameter
    # (two Linear layers, weight and bias each: 4).
    assert ("zeros", 4 * I32) in rows


def test_host_row_peak(traced):
    _, snap = traced
    # The host peak is when the DataLoader pins the batch's labels: alive then are 1 + 2 + 2 +
    # 80 MiB, the data set (64 x 1024 fp32 = 256 KiB, 64 int64 labels = 512 B), the collated
    # batch (16 x 1024 fp32 = 64 KiB, 16 int64 = 128 B) and its pinned copy (the same again).
    batch = 16 * 1024 * F32 + 16 * I64
    expected = (1 + 2 + 2 + 80) * MiB + 64 * 1024 * F32 + 64 * I64 + 2 * batch
    assert snap["summary"]["devices"]["cpu"]["peak_bytes"] == expected
