"""The Python API as the README shows it (its code block is what runs): `memlens.prepare` before
torch, then `memlens.Tracer` around ordinary GPU code, in a fresh interpreter."""

import json
import os
import re
import subprocess
import sys

import pytest

from support.paths import REPO


def readme_example() -> str:
    """The Python block of the README's "Python API" section, as a user would copy it."""
    section = (REPO / "README.md").read_text().split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow  # traces in a fresh process
def test_the_readme_example_counts_fp32_adamw_exactly(tmp_path):
    program = readme_example() + '\nprint("RESULT " + json.dumps(snap["summary"]))\n'
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    out = subprocess.run([sys.executable, "-c", "import json\n" + program], env=env,
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
    assert (tmp_path / "mlp.json").stat().st_size > 0
    # The number the README's last line prints (and its comment claims).
    assert "\n1073905664\n" in out.stdout


def test_prepare_names_an_unknown_device(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    out = subprocess.run([sys.executable, "-c", "import memlens; memlens.prepare('h1000')"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "h1000" in out.stderr and "h100-80gb" in out.stderr
