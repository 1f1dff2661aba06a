"""The Python API as the README shows it: `memlens.prepare` before torch, then `memlens.Tracer`
around ordinary GPU code, in a fresh interpreter that has nothing loaded beforehand."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, sys
import memlens
memlens.prepare("h100-80gb")

import torch
from torch import nn

with memlens.Tracer("h100-80gb") as tracer:
    model = nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        loss = model(torch.randn(64, 4096, device="cuda")).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
snap = tracer.snapshot()
memlens.write_snapshot(snap, sys.argv[1])
print("RESULT " + json.dumps(snap["summary"]))
"""


def test_prepare_then_tracer_counts_mixed_precision_free_adamw_exactly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path / "s.json")], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.split("RESULT ", 1)[1])
    params = 4096 * 16384 + 16384 + 16384 * 4096 + 4096
    at_peak = summary["categories_at_peak"]
    # fp32 AdamW: 4 bytes of weights, 4 of gradients, 8 of moments per parameter, to the byte
    # (each tensor's size is a multiple of the allocator's 512-byte rounding).
    assert at_peak["parameter"] == 4 * params
    assert at_peak["gradient"] == 4 * params
    assert at_peak["optimizer_state"] == 8 * params
    assert summary["peak_phase"].startswith("optimizer_step_iter_")
    assert summary["devices"]["cuda:0"]["peak_bytes"] == summary["peak_bytes"]
    assert (tmp_path / "s.json").stat().st_size > 0


def test_prepare_names_an_unknown_device(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    out = subprocess.run([sys.executable, "-c", "import memlens; memlens.prepare('h1000')"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "h1000" in out.stderr and "h100-80gb" in out.stderr
