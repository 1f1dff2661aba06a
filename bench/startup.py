"""What a `memlens run` costs before the script's first line, against `python -c "import torch"`
in the same run (a ratio: absolute times on a shared machine are noise).

Six commands, interleaved `--repeat` times, each keeping its best wall time:
  import torch      python -c "import torch"                        (the floor)
  missing script    memlens run -- no_such.py                       (an error said before torch)
  first line        memlens run --no-snapshot -- first_line.py      (the script exits at once)
  one-layer step    memlens run --no-snapshot -- linear_step.py     (a whole small trace, CUDA target)
  warm first line   the same "first line", forked from the warm worker (worker/warm.py), as the
  warm step         language server, `--ranks all` and `memlens fit` start their workers

    .venv/bin/python bench/startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

FIRST_LINE = "import sys\nsys.exit(0)\n"
LINEAR_STEP = """\
import torch
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _wall(argv: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _forked_wall(warm, argv: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    process = warm.worker_process(argv, str(cwd), env)
    assert isinstance(process, warm.ForkedWorkerProcess)
    process.start()
    process.wait()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    memlens = [sys.executable, "-m", "memlens", "run"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "first_line.py").write_text(FIRST_LINE)
        (folder / "linear_step.py").write_text(LINEAR_STEP)
        commands = {
            "import torch": [sys.executable, "-c", "import torch"],
            "missing script": [*memlens, "--", "no_such.py"],
            "first line": [*memlens, "--no-snapshot", "--", "first_line.py"],
            "one-layer step": [*memlens, "--no-snapshot", "--", "linear_step.py"],
        }
        _wall(commands["one-layer step"], folder, env)  # builds the shim and warms caches
        sys.path.insert(0, str(REPO / "python"))
        from memlens.worker import warm
        from memlens.worker.protocol import worker_env

        warm_env = worker_env(env)
        warm.prestart(sys.executable, warm_env).ready()
        forked = {"warm first line": commands["first line"],
                  "warm step": commands["one-layer step"]}
        best = {name: float("inf") for name in [*commands, *forked]}
        for _ in range(args.repeat):
            for name, argv in commands.items():
                best[name] = min(best[name], _wall(argv, folder, env))
            for name, argv in forked.items():
                best[name] = min(best[name], _forked_wall(warm, argv, folder, warm_env))
    floor = best["import torch"]
    print(f"{'command':<16} {'best wall':>10} {'× import torch':>15}")
    for name, seconds in best.items():
        print(f"{name:<16} {seconds:>9.2f}s {seconds / floor:>14.2f}×")
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
