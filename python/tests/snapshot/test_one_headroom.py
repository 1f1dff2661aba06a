"""One headroom (issue 27 item 3): the device's memory less (reserved peak + memory outside the
allocator), computed once into the snapshot; `memlens show`, the editor's snapshot info (status
bar) and the panel (common/headroom.ts) show that number, none derives its own."""

import json

import pytest

from memlens.reports.terminal import verdict_line
from memlens.snapshot.digest import digest
from memlens.units import format_bytes
from support.runs import run_memlens

TRAIN = """\
import torch
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 8)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randn(64, 256, device="cuda")).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def _summary(**fields):
    return {"meta": {"device": {"total_memory_bytes": 80 * 2**30}},
            "summary": {"reserved_peak_bytes": 10 * 2**30, "outside_allocator_bytes": 2**30,
                        "oom": None, **fields}}


def test_the_cli_line_says_the_snapshots_headroom():
    fits = verdict_line(_summary(fits=True, headroom_bytes=69 * 2**30))
    assert fits.endswith("= 11.0 GiB of 80.0 GiB (69.0 GiB headroom)")
    over = verdict_line(_summary(fits=False, headroom_bytes=-3 * 2**30))
    assert over.endswith("(over by 3.0 GiB)")


@pytest.mark.slow  # traces in a fresh process
def test_show_and_the_editors_snapshot_info_carry_the_same_headroom(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / "s.json"
    out = run_memlens("run", "--device", "h100-80gb", "--snapshot", str(path), "--",
                      "train.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    snap = json.loads(path.read_text())
    s = snap["summary"]
    total = snap["meta"]["device"]["total_memory_bytes"]
    # The definition: reserved, not allocated — the allocated peak would give more headroom.
    assert s["headroom_bytes"] == total - (s["reserved_peak_bytes"] + s["outside_allocator_bytes"])
    assert s["headroom_bytes"] < total - s["peak_bytes"]
    assert s["fits"] is True
    shown = run_memlens("show", str(path))
    assert f"({format_bytes(s['headroom_bytes'])} headroom)" in shown.stdout
    d = digest(snap, str(path))["summary"]
    assert (d["fits"], d["headroomBytes"]) == (True, s["headroom_bytes"])
