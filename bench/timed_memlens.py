"""`memlens` run by a bench in a fresh process, timed: what the benches that compare whole runs
share (each reports ratios of these wall times measured in one run)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def memlens(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time and result of `python -m memlens ARGS` from this checkout; exits on failure."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH"))
                                        if p)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "memlens", *args], cwd=cwd, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"memlens {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return wall, out
