"""`memlens fit --jobs 2` against the same points traced one after another.

    .venv/bin/python bench/fit_search.py                      # 4 points of examples/gpt
    .venv/bin/python bench/fit_search.py --jobs 2 --batches 1,2,4,8
    .venv/bin/python bench/fit_search.py --shipped --batches $(seq -s, 1 16)   # 16 points

The baseline: `memlens run` of each point's command, one after another (what a user would do
by hand), summed. The search: `memlens fit --no-prune --jobs N` over the same points (no
pruning, so both trace exactly the same points). It checks that both agree on every point's
peak, prints wall times and the ratio (search / sum of single traces; 1/N is the floor), and
writes them to bench/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
from pathlib import Path

from timed_memlens import REPO, memlens

SCRIPT = REPO / "examples" / "gpt" / "train.py"
SMALL = ["--n-layer", "2", "--block-size", "512", "--steps", "2"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--batches", default="1,2,4,8")
    p.add_argument("--device", default="h100-80gb")
    p.add_argument("--shipped", action="store_true",
                   help="the example as shipped (12 layers, 1,024 tokens), not 2 layers of 512")
    a = p.parse_args()
    batches = a.batches.split(",")
    script_args = [] if a.shipped else SMALL
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        singles, peaks = 0.0, {}
        for b in batches:
            wall, out = memlens("run", "--device", a.device, "--json", "--no-snapshot",
                                "--progress", "none", "--", str(SCRIPT), *script_args,
                                "--batch-size", b, cwd=cwd)
            singles += wall
            peaks[b] = json.loads(out.stdout)["peak_bytes"]
        wall, out = memlens("fit", "--device", a.device, "--arg", f"--batch-size={a.batches}",
                            "--no-prune", "--jobs", str(a.jobs), "--json", "--progress", "none",
                            "--no-snapshots", "--run-dir", str(cwd / "run"), "--",
                            str(SCRIPT), *script_args, cwd=cwd)
        doc = json.loads(out.stdout)
    found = {r["point"]["--batch-size"]: r["peak_bytes"] for r in doc["rows"]}
    assert found == peaks, (found, peaks)
    assert doc["counts"]["traced"] == len(batches)
    ratio = wall / singles
    load = os.getloadavg()[0]
    print(f"{len(batches)} points of {SCRIPT.name} on {a.device}: single traces one after "
          f"another {singles:.1f} s; memlens fit --jobs {a.jobs} {wall:.1f} s; ratio "
          f"{ratio:.2f} (floor {1 / a.jobs:.2f}); {os.cpu_count()} cores, load {load:.1f}")
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "fit_search.json").write_text(json.dumps({
        "date": dt.date.today().isoformat(), "machine": platform.platform(),
        "cores": os.cpu_count(), "load_average": load, "points": len(batches),
        "script_args": script_args,
        "jobs": a.jobs, "single_traces_s": round(singles, 2), "fit_s": round(wall, 2),
        "ratio": round(ratio, 3)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
