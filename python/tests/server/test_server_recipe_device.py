"""The recipe's device wins over the `memlens.device` setting's default (issue 27 item 2): the
server passes `--device` to the worker only when the user set it (or the trace asked for one),
so a `memlens.toml` with `device = "a100-40gb"` traces on it in the editor as on the CLI."""

import json
import subprocess
import sys

import pytest

from memlens.server.fitting import FitRequest, fit_command
from memlens.server.settings import parse_settings
from memlens.server.targets import TargetInfo
from memlens.server.tracing import TraceRequest
from memlens.worker.protocol import trace_command
from support.runs import _env

RECIPE = """\
device = "a100-40gb"
iterations = 1

[[model]]
target = "tiny.py:Tiny"
batch = 4
inputs = [ { shape = ["batch", 16] } ]
"""

TINY = """\
import torch.nn as nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x)
"""


def _model(folder: str) -> TargetInfo:
    return TargetInfo(id="model:tiny.py:Tiny", kind="model", name="Tiny",
                      path=f"{folder}/tiny.py", line=3, folder=folder, symbol="Tiny")


def test_the_device_setting_is_unset_unless_the_user_gave_one():
    assert parse_settings({}).device is None
    assert parse_settings({"device": ""}).device is None
    assert parse_settings({"device": None}).device is None
    assert parse_settings({"device": " A100-40GB "}).device == "a100-40gb"


def test_the_worker_gets_a_device_only_when_one_was_asked_for():
    unset, _, _ = trace_command(TraceRequest(_model("/ws"), None), "/ws/s.json", "/py")
    assert "--device" not in unset
    assert unset[:5] == ["/py", "-m", "memlens", "trace", "/ws/tiny.py:Tiny"]
    chosen, _, _ = trace_command(TraceRequest(_model("/ws"), "h200"), "/ws/s.json", "/py")
    assert chosen[chosen.index("--device") + 1] == "h200"
    script = TargetInfo(id="script:train.py", kind="script", name="train.py",
                        path="/ws/train.py", line=0, folder="/ws", program="/ws/train.py")
    fit_unset, _, _ = fit_command(FitRequest(script, None, None, []), "/py")
    assert "--device" not in fit_unset
    assert fit_unset[4:9] == ["--json", "--progress", "json", "--jobs", "1"]


@pytest.mark.slow  # the worker traces in a fresh process
def test_a_recipe_device_is_the_traced_device_when_the_setting_is_unset(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "memlens.toml").write_text(RECIPE)
    snapshot = str(tmp_path / ".memlens" / "s.json")
    # The worker command exactly as the server builds it from default settings.
    device = parse_settings({}).device
    argv, cwd, env = trace_command(TraceRequest(_model(str(tmp_path)), device), snapshot,
                                   "python")
    argv[0] = sys.executable
    out = subprocess.run(argv, cwd=cwd, env=_env(env), capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["device"] == "a100-40gb"
    assert summary["device_total_bytes"] == 40 * 1024**3
