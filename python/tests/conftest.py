import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
REPO = TESTS.parent.parent


def run_memlens(*args: str, cwd: str | os.PathLike | None = None, env: dict | None = None,
                timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the memlens CLI in a fresh process, as a user would."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "python"), full_env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "memlens", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def real_and_traced_on_cpu(case: str, args: list[str]) -> tuple[dict, dict]:
    """The same step run for real on the CPU, measured by the CPU allocator's own memory events
    (support/measure_cpu.py, its own process), and traced by `memlens run --device cpu --json`."""
    import json

    out = subprocess.run([sys.executable, str(TESTS / "support" / "measure_cpu.py"), case, *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    run = run_memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--", case, *args)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.stdout), json.loads(run.stdout)


@pytest.fixture
def memlens():
    return run_memlens


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    """A stand-in panel bundle for the HTML report, so tests of `--html` do not depend on the
    TypeScript build (MEMLENS_WEBVIEW_DIST points at it)."""
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "webview.js").write_text('document.body.dataset.ok="1";\n//# sourceMappingURL=webview.js.map\n')
    (d / "webview.css").write_text("body{color:red}\n/*# sourceMappingURL=webview.css.map */")
    monkeypatch.setenv("MEMLENS_WEBVIEW_DIST", str(d))
    return d


def traced_gpu_snapshot(folder: Path) -> dict:
    """The snapshot of a small GPU-target trace (scripts/values/bounded_sizes.py): it has an
    allocation stream and the allocator's rows (reserved, fragmentation)."""
    import json

    path = folder / "gpu.json"
    out = run_memlens("run", "--snapshot", str(path), "--",
                      str(TESTS / "scripts" / "values" / "bounded_sizes.py"))
    assert out.returncode == 0, out.stderr
    return json.loads(path.read_text())


def run_python(code: str, env: dict | None = None, timeout: int = 600) -> object:
    """Run `code` in a fresh interpreter that has the fake-CUDA shim loaded (before torch, as a
    CUDA target needs); the code assigns `result`, which comes back through JSON."""
    import json
    import textwrap

    program = ("from memlens.cuda.build import ensure_fake_cuda_support\n"
               "ensure_fake_cuda_support()\n" + textwrap.dedent(code) +
               "\nimport json, os, sys\nsys.stdout.write('\\nRESULT ' + json.dumps(result))\n"
               # os._exit, as the CLI leaves: see memlens/__main__.py
               "sys.stdout.flush(); sys.stderr.flush(); os._exit(0)\n")
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "python"), full_env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", program], env=full_env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.rsplit("\nRESULT ", 1)[1])


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda_build: needs a torch built with CUDA (no GPU needed); skipped otherwise")


def pytest_collection_modifyitems(config, items):
    # Read the torch install from disk: importing torch here would defeat the tests that must
    # load the fake-CUDA shim before torch (they run in subprocesses anyway).
    from memlens.cuda.build import find_torch

    if find_torch().cuda_build:
        return
    skip = pytest.mark.skip(reason="this interpreter's torch is a CPU-only build")
    for item in items:
        if "cuda_build" in item.keywords:
            item.add_marker(skip)
