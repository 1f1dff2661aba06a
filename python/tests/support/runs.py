"""memlens and Python in fresh processes, as a user runs them, with this checkout's `python/`
first on PYTHONPATH (an installed memlens must not answer for it)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from support import warm_cli
from support.paths import REPO, TESTS


def _env(extra: dict | None) -> dict:
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "python"), env.get("PYTHONPATH", "")) if p)
    return env


def run_memlens(*args: str, cwd: str | os.PathLike | None = None, env: dict | None = None,
                timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the memlens CLI in a process of its own, as a user would: `python -m memlens ARGS`
    forked from a warm worker (support/warm_cli.py: what the language server, `memlens fit` and
    `--ranks all` start their workers with), or started cold with MEMLENS_WARM_WORKER=0."""
    argv = [sys.executable, "-m", "memlens", *args]
    full_env = _env(env)
    out = warm_cli.run(argv, cwd, full_env, timeout)
    if out is not None:
        return out
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def run_python(code: str, env: dict | None = None, timeout: int = 600) -> object:
    """Run `code` in a fresh interpreter that has the fake-CUDA shim loaded (before torch, as a
    CUDA target needs); the code assigns `result`, which comes back through JSON."""
    program = ("from memlens.cuda.build import ensure_fake_cuda_support\n"
               "ensure_fake_cuda_support()\n" + textwrap.dedent(code) +
               "\nimport json, os, sys\nsys.stdout.write('\\nRESULT ' + json.dumps(result))\n"
               # os._exit, as the CLI leaves: see memlens/__main__.py
               "sys.stdout.flush(); sys.stderr.flush(); os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", program], env=_env(env), capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.rsplit("\nRESULT ", 1)[1])


def real_and_traced_on_cpu(case: str, args: list[str]) -> tuple[dict, dict]:
    """The same step run for real on the CPU, measured by the CPU allocator's own memory events
    (support/measure_cpu.py, its own process), and traced by `memlens run --device cpu --json`."""
    out = subprocess.run([sys.executable, str(TESTS / "support" / "measure_cpu.py"), case, *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    # Every block traced: a comparison with a real run checks the engine, not layer replay
    run = run_memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--no-layer-replay",
                      "--", case, *args)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.stdout), json.loads(run.stdout)


def assert_phases_match(real: dict, est: dict, tolerance: float) -> None:
    """The traced step has the real one's phases, and each phase's peak and starting memory,
    and the overall peak, within `tolerance` (relative) of the real ones."""
    import pytest

    assert [p["name"] for p in est["phases"]] == [p["name"] for p in real["phases"]]
    assert est["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=tolerance)
    for e, r in zip(est["phases"], real["phases"]):
        assert e["peak_bytes"] == pytest.approx(r["peak_bytes"], rel=tolerance), e["name"]
        assert e["current_before_bytes"] == pytest.approx(r["current_before_bytes"],
                                                          rel=tolerance), e["name"]


def traced_gpu_snapshot(folder: Path) -> dict:
    """The snapshot of a small GPU-target trace (scripts/values/bounded_sizes.py): it has an
    allocation stream and the allocator's rows (reserved, fragmentation)."""
    path = folder / "gpu.json"
    out = run_memlens("run", "--snapshot", str(path), "--",
                      str(TESTS / "scripts" / "values" / "bounded_sizes.py"))
    assert out.returncode == 0, out.stderr
    return json.loads(path.read_text())


def run_script_on_h100(folder: Path, script: Path, name: str) -> tuple[str, dict]:
    """`memlens run` of `script` on a simulated H100 in `folder`: what it printed (stdout and
    stderr) and its snapshot; the run must succeed."""
    snap = folder / f"{name}.json"
    out = run_memlens("run", "--device", "h100-80gb", "--json", "--progress", "none",
                      "--snapshot", str(snap), "--", str(script), cwd=folder)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout + out.stderr, json.loads(snap.read_text())


def marked_run_on_h100(folder: Path, script: Path, iterations: int
                       ) -> tuple[list[tuple[str, int, int]], dict, str]:
    """`memlens run` of a script that prints `MARK name allocated reserved` lines (the
    simulated allocator's counters at its steps) on a simulated H100, with room for
    `iterations` backward passes (CUDA graph warm-ups count): the marks in order, the snapshot,
    and what it printed (the pool table on one line per pool)."""
    snap = folder / "marked.json"
    out = run_memlens("run", "--device", "h100-80gb", "--iterations", str(iterations),
                      "--progress", "none", "--snapshot", str(snap), "--", str(script),
                      cwd=folder, env={"COLUMNS": "300"})
    assert out.returncode == 0, out.stderr[-3000:]
    marks = [(fields[1], int(fields[2]), int(fields[3])) for fields in
             (line.split() for line in out.stdout.splitlines() if line.startswith("MARK "))]
    return marks, json.loads(snap.read_text()), out.stdout + out.stderr
