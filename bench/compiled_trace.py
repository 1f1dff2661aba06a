"""Trace time of a compiled training step against the eager trace of the same step (issue 17).

    python bench/compiled_trace.py [--model gpt] [--repeat N] [--device cpu]

The step is python/tests/cases/compiled_case.py (a 2-block GPT by default, AdamW, two
iterations), traced by `memlens run --no-snapshot` in a fresh process, once with
`torch.compile(model)` (Dynamo + Inductor's lowering, scheduling and wrapper code on fake tensors;
no kernel is built) and once eagerly (`--how eager`). Modes are interleaved and each keeps its
best of `--repeat` wall times (the process start and imports included, as a user waits them).
Prints one JSON object (also bench/results/compiled_trace.json): the seconds of each and
their ratio compiled / eager.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join(HERE, "..", "python", "tests", "cases", "compiled_case.py")
MODES = {"compiled": "module", "eager": "eager"}


def trace_seconds(model: str, how: str, device: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..", "python")}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "memlens", "run", "--device", device,
                          "--no-snapshot", "--json", "--", CASE, "--model", model, "--how", how,
                          *(["--device", "cuda"] if device != "cpu" else [])],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    best = {mode: float("inf") for mode in MODES}
    for _ in range(a.repeat):
        for mode, how in MODES.items():
            best[mode] = min(best[mode], trace_seconds(a.model, how, a.device))
    result = {"model": a.model, "device": a.device,
              **{f"{m}_s": round(s, 2) for m, s in best.items()},
              "ratio_compiled_over_eager": round(best["compiled"] / best["eager"], 2)}
    print(json.dumps(result))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "compiled_trace.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
