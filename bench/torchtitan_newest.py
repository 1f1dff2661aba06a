"""torchtitan's newest release, traced unmodified: its configurations, one `memlens run` each.

    python bench/torchtitan_newest.py --python /path/to/env/bin/python --assets /path/to/torchtitan
    python bench/torchtitan_newest.py ... --only cp2,llama3-8b

`--python` is an environment with torchtitan installed from PyPI (and its requirements) and
torch; memlens is taken from this checkout. torchtitan's configurations read its test assets
from the working directory: `--assets` is a torchtitan checkout (any recent commit) whose
`tests/assets/tokenizer` is used. Its `c4_test` dataset is a file kept with Git LFS, which a
snapshot may lack: where it is absent, 2,000 made-up documents are written in its place (the
trace needs token shapes, not text). Each case runs torchtitan's own launch line (`torchrun ...
-m torchtitan.train --module M --config C`) through `memlens run --from-script` in a scratch
folder; rank 0 of 8 simulated H100s unless the case asks for every role (`--ranks all`).

Prints one row per case (traced or the error's first line, the device peak, wall time) and
writes bench/results/torchtitan_newest-DATE-TIME.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAUNCH = """#!/bin/bash
# torchtitan's launch line (its run_train.sh), as a user runs it
NGPU=${NGPU:-8}
PYTORCH_ALLOC_CONF="expandable_segments:True" \\
torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d --rdzv_endpoint=localhost:0 \\
    -m torchtitan.train --module ${MODULE:-llama3} --config ${CONFIG:-llama3_debugmodel} "$@"
"""
STEPS = ["--training.steps", "2"]
# name -> (module, config, memlens options, torchtitan options)
CASES = {
    "fsdp": ("llama3", "llama3_debugmodel", [], []),
    "hsdp": ("llama3", "llama3_debugmodel", [], ["--parallelism.data_parallel_replicate_degree=2"]),
    "compile": ("llama3", "llama3_debugmodel", [], ["--compile.enable"]),
    "float8": ("llama3", "llama3_debugmodel_float8", [], []),
    "cp2": ("llama3", "llama3_debugmodel", [], ["--parallelism.context_parallel_degree=2"]),
    # torchtitan refuses CUDA graphs with pipeline parallelism and with expert parallelism's
    # token exchange (its own config check): those run without them, as it asks
    "tp2-pp2": ("llama3", "llama3_debugmodel", ["--ranks", "all"],
                ["--training.disable_cuda_graphs", "--parallelism.tensor_parallel_degree=2",
                 "--parallelism.pipeline_parallel_degree=2"]),
    "qwen3": ("qwen3", "qwen3_debugmodel", [], []),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_debugmodel", [], []),
    "deepseek-v3-ep2": ("deepseek_v3", "deepseek_v3_debugmodel", [],
                        ["--training.disable_cuda_graphs",
                         "--parallelism.expert_parallel_degree=2"]),
    "llama3-8b": ("llama3", "llama3_8b", [],
                  ["--hf_assets_path", "./tests/assets/tokenizer",
                   "--dataloader.dataset", "c4_test"]),
}


def _made_up_c4(path: Path) -> None:
    random.seed(0)
    words = ("memory tensor gradient layer optimizer shard rank device batch sequence token "
             "model attention weight bias norm loss step pipeline stage expert").split()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(2000):
            text = " ".join(random.choice(words) for _ in range(random.randint(200, 600)))
            f.write(json.dumps({"text": text, "url": f"https://example.org/{i}"}) + "\n")


def prepare(folder: Path, assets: Path) -> None:
    shutil.copytree(assets / "tests" / "assets" / "tokenizer",
                    folder / "tests" / "assets" / "tokenizer")
    c4 = assets / "tests" / "assets" / "c4_test" / "data.json"
    target = folder / "tests" / "assets" / "c4_test" / "data.json"
    if c4.is_file() and not c4.read_bytes().startswith(b"version https://git-lfs"):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(c4, target)
    else:
        _made_up_c4(target)
    (folder / "run_train.sh").write_text(LAUNCH)


def run_case(python: str, folder: Path, name: str) -> dict:
    module, config, options, flags = CASES[name]
    snapshot = folder / f"{name}.json"
    env = dict(os.environ, MODULE=module, CONFIG=config,
               PATH=f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "python"),
                                                      os.environ.get("PYTHONPATH")) if p))
    argv = [python, "-m", "memlens", "run", "--progress", "none", "--json", "--snapshot",
            str(snapshot), *options, "--from-script", "run_train.sh", "--", *STEPS, *flags]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=1800)
    wall = time.perf_counter() - start
    last = (proc.stdout.strip().splitlines() or ["{}"])[-1]
    try:
        summary = json.loads(last)
    except json.JSONDecodeError:
        summary = {}
    row = {"case": name, "module": module, "config": config, "flags": options + flags,
           "wall_s": round(wall, 1), "traced": proc.returncode == 0}
    if proc.returncode != 0:
        error = summary.get("error", {}).get("message") or proc.stderr.strip()[-400:]
        row["error"] = error.splitlines()[0][:300] if error else f"exit {proc.returncode}"
        return row
    if summary.get("format") == "memlens.ranks":  # --ranks all: the worst rank
        ranks = [r for r in summary.get("ranks", []) if r.get("status") == "ok"]
        row["peak_bytes"] = max((r.get("peak_bytes") or 0 for r in ranks), default=None)
        row["ranks_traced"] = len(ranks)
    else:
        row["peak_bytes"] = summary.get("peak_bytes")
        row["reserved_peak_bytes"] = summary.get("reserved_peak_bytes")
        row["notes"] = [n for n in summary.get("notes", []) if "traced eagerly" in n]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="an environment with torchtitan installed")
    ap.add_argument("--assets", required=True, type=Path, help="a torchtitan checkout")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    program = ("import torch, importlib.metadata as m; "
               "print(m.version('torchtitan'), torch.__version__)")
    version = subprocess.run([args.python, "-c", program], capture_output=True, text=True,
                             check=True).stdout.split()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prepare(folder, args.assets)
        for name in names:
            row = run_case(args.python, folder, name)
            rows.append(row)
            peak = f"{row['peak_bytes'] / 2**30:.2f} GiB" if row.get("peak_bytes") else "-"
            print(f"{name:16} {'traced' if row['traced'] else 'FAILED':7} {peak:>10} "
                  f"{row['wall_s']:6.1f} s  {row.get('error', '')}", flush=True)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    record = {"date": dt.date.today().isoformat(), "torchtitan": version[0], "torch": version[1],
              "load_average": os.getloadavg(), "cases": rows}
    (out / f"torchtitan_newest-{dt.datetime.now():%Y%m%d-%H%M%S}.json").write_text(
        json.dumps(record, indent=1))
    return 0 if all(r["traced"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
