"""`memlens show` of a large snapshot, as a ratio against reading the same file with `json.loads`
in the same run (the machine's speed cancels out).

    node bench/synthetic-snapshot.mjs 560000 /tmp/big.json      # ~140 MB, 560,000 tensors
    .venv/bin/python bench/show_large.py /tmp/big.json

Each is a fresh process (imports included), best of --repeat, interleaved."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _seconds(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("snapshot")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    baseline = [sys.executable, "-c", f"import json; json.loads(open({args.snapshot!r}).read())"]
    show = [sys.executable, "-m", "memlens", "show", args.snapshot]
    best = {"json.loads": float("inf"), "memlens show": float("inf")}
    for _ in range(args.repeat):
        best["json.loads"] = min(best["json.loads"], _seconds(baseline))
        best["memlens show"] = min(best["memlens show"], _seconds(show))
    size = os.path.getsize(args.snapshot)
    ratio = best["memlens show"] / best["json.loads"]
    line = (f"{Path(args.snapshot).name} ({size / 2**20:.0f} MiB): json.loads "
            f"{best['json.loads']:.1f} s, memlens show {best['memlens show']:.1f} s "
            f"({ratio:.2f}x)")
    print(line)
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    with open(results / "show_large.txt", "a") as f:
        f.write(time.strftime("%Y-%m-%d %H:%M ") + line + "\n")


if __name__ == "__main__":
    main()
