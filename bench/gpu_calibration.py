"""Measure the caching allocator on a real GPU, for tests/cuda/test_gpu_calibration.py to compare
memlens' estimates against.

Run on a machine with a CUDA GPU and a CUDA build of PyTorch (nothing here runs without one):

    python bench/gpu_calibration.py [--cases grow,churn,mlp] [--out python/tests/fixtures/gpu]

Each workload of python/tests/cases/calibration.py runs in a fresh process, once with the
default allocator settings and once with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
and reports torch.cuda.max_memory_allocated() and max_memory_reserved() after its two
iterations, plus the device memory in use before the workload (the CUDA context, as
cudaMemGetInfo sees it) and after it (context + reserved + what libraries took outside the
allocator). The fixture records the GPU's name, its memlens device, the torch and CUDA
versions and the date; commit it under python/tests/fixtures/gpu/.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES_SCRIPT = ROOT / "python" / "tests" / "cases" / "calibration.py"
DEFAULT_OUT = ROOT / "python" / "tests" / "fixtures" / "gpu"
ALLOC_CONFS = ("", "expandable_segments:True")
MARK = "MEMLENS_CALIBRATION "

# Runs in the child: measure around the unmodified workload script.
_MEASURE = r"""
import json, runpy, sys, torch
torch.cuda.init()
torch.empty(0, device="cuda:0")  # create the context before measuring it
free, total = torch.cuda.mem_get_info(0)
before = total - free
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info(0)
stats = torch.cuda.memory_stats(0)
print("MEMLENS_CALIBRATION " + json.dumps({
    "max_memory_allocated": torch.cuda.max_memory_allocated(0),
    "max_memory_reserved": torch.cuda.max_memory_reserved(0),
    "num_alloc_retries": stats.get("num_alloc_retries", 0),
    "device_used_before_bytes": before,
    "device_used_after_bytes": total - free,
    "device_total_bytes": total,
}))
"""


def measure(case: str, alloc_conf: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(CASES_SCRIPT), "--case", case],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"case {case} ({alloc_conf or 'default'}) failed:\n{out.stderr}")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(MARK))
    return json.loads(line[len(MARK):])


def memlens_device(name: str, total: int) -> str:
    """The memlens device whose display name matches the GPU's, else the closest in memory."""
    sys.path.insert(0, str(ROOT / "python"))
    from memlens.devices import all_devices

    cuda = [d for d in all_devices() if d.type == "cuda"]
    for d in cuda:
        if d.display_name == name:
            return d.name
    return min(cuda, key=lambda d: abs(d.total_memory_bytes - total)).name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="grow,churn,mlp")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing to measure", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    total = torch.cuda.get_device_properties(0).total_memory
    results = []
    for case in args.cases.split(","):
        for conf in ALLOC_CONFS:
            m = measure(case, conf)
            results.append({"case": case, "alloc_conf": conf, **m})
            print(f"{case:6} {conf or 'default':26} allocated {m['max_memory_allocated']:>14,} "
                  f"reserved {m['max_memory_reserved']:>14,}")
    today = _dt.date.today().isoformat()
    fixture = {"gpu": name, "memlens_device": memlens_device(name, total),
               "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
               "date": today, "device_total_bytes": total, "script": str(
                   CASES_SCRIPT.relative_to(ROOT)), "results": results}
    slug = "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")
    path = Path(args.out) / f"{slug}-torch{torch.__version__.split('+')[0]}-{today}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
