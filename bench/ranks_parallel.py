"""`memlens run --ranks all` against tracing the ranks one after another.

    .venv/bin/python bench/ranks_parallel.py                 # 8-rank FSDP2 GPT-2 medium
    .venv/bin/python bench/ranks_parallel.py --jobs 2 --world-size 8 --script S [ARGS...]

Three ways to get every rank's peak of the same job (bench/gpt2_medium_fsdp.py by default, on
the h100-80gb target):
  sequential  `memlens run --rank R` for R = 0..W-1, one after another (what a user would do
              without --ranks);
  all         `memlens run --ranks all --jobs N`: rank 0, then one rank per other role, N
              worker processes at a time;
  every       `memlens run --ranks every --jobs N`: all W ranks in N parallel workers, no
              grouping (what the parallel workers alone buy on this machine's cores).
It checks that grouping is right (every rank's sequential peak equals the peak --ranks all
reports for its group) and that the parallel runs agree with the sequential ones, then prints
wall times, speed-ups and per-core figures, and writes them to bench/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import sys
import tempfile
from pathlib import Path

from timed_memlens import REPO, memlens

DEFAULT_SCRIPT = REPO / "bench" / "gpt2_medium_fsdp.py"


def cpu_seconds() -> float:
    """User + system time of every finished child process and theirs (the rank workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def sequential(common: list[str], world: int, cwd: Path) -> tuple[float, dict[int, dict]]:
    total, peaks = 0.0, {}
    for rank in range(world):
        wall, out = memlens("run", *common, "--rank", str(rank), "--json", "--no-snapshot",
                            "--progress", "none", *SCRIPT_ARGS, cwd=cwd)
        total += wall
        peaks[rank] = {"peak_bytes": json.loads(out.stdout)["peak_bytes"], "wall_s": wall}
        print(f"  sequential rank {rank}: {wall:.1f} s", flush=True)
    return total, peaks


def parallel(mode: str, common: list[str], jobs: int, cwd: Path) -> tuple[float, dict]:
    wall, out = memlens("run", *common, "--ranks", mode, "--jobs", str(jobs), "--json",
                        "--progress", "none", "--snapshot", str(cwd / f"{mode}.json"),
                        *SCRIPT_ARGS, cwd=cwd)
    print(f"  --ranks {mode}: {wall:.1f} s", flush=True)
    return wall, json.loads(out.stdout.strip().splitlines()[-1])


def check(seq: dict[int, dict], index: dict, mode: str) -> list[str]:
    """Every rank's own peak must equal the one reported for it (its group's)."""
    problems = []
    for row in index["ranks"]:
        for rank in row["alike"]:
            if seq[rank]["peak_bytes"] != row["peak_bytes"]:
                problems.append(f"--ranks {mode}: rank {rank} peaks at {seq[rank]['peak_bytes']}"
                                f" B alone, {row['peak_bytes']} B as rank {row['rank']}'s alike")
    return problems


def main() -> None:
    global SCRIPT_ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=8)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--device", default="h100-80gb")
    p.add_argument("--script", default=str(DEFAULT_SCRIPT))
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    SCRIPT_ARGS = ["--", args.script, *args.script_args]
    common = ["--device", args.device, "--world-size", str(args.world_size)]
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    print(f"{args.world_size}-rank job {Path(args.script).name}, {cores} cores, "
          f"--jobs {args.jobs}, load average {load:.1f}", flush=True)
    cpu = {}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        before = cpu_seconds()
        seq_wall, seq = sequential(common, args.world_size, cwd)
        cpu["sequential"], before = cpu_seconds() - before, cpu_seconds()
        all_wall, all_index = parallel("all", common, args.jobs, cwd)
        cpu["all"], before = cpu_seconds() - before, cpu_seconds()
        every_wall, every_index = parallel("every", common, args.jobs, cwd)
        cpu["every"] = cpu_seconds() - before
    load_after = os.getloadavg()[0]
    problems = check(seq, all_index, "all") + check(seq, every_index, "every")
    traced = len(all_index["ranks"])
    result = {
        "date": dt.date.today().isoformat(), "machine": platform.machine(), "cores": cores,
        "load_average": [round(load, 1), round(load_after, 1)], "jobs": args.jobs, "script": Path(args.script).name,
        "world_size": args.world_size, "device": args.device,
        "sequential_s": round(seq_wall, 1), "ranks_all_s": round(all_wall, 1),
        "ranks_every_s": round(every_wall, 1), "ranks_traced_by_all": traced,
        "groups": [r["alike"] for r in all_index["ranks"]],
        "speedup_all": round(seq_wall / all_wall, 2),
        "speedup_every": round(seq_wall / every_wall, 2),
        # Per core: how much of the ideal N-core speed-up the parallel workers reach, and the
        # core-seconds one traced rank costs in each mode.
        "parallel_efficiency_every": round(seq_wall / every_wall / min(args.jobs, cores), 2),
        "core_s_per_rank_sequential": round(seq_wall / args.world_size, 1),
        "core_s_per_rank_every": round(every_wall * min(args.jobs, cores) / args.world_size, 1),
        # CPU time actually spent (all processes), which other jobs on the machine do not
        # inflate: per traced rank, and in total for each way.
        "cpu_s": {k: round(v, 1) for k, v in cpu.items()},
        "cpu_s_per_traced_rank": {"sequential": round(cpu["sequential"] / args.world_size, 1),
                                  "all": round(cpu["all"] / traced, 1),
                                  "every": round(cpu["every"] / args.world_size, 1)},
        "peaks": {r: v["peak_bytes"] for r, v in seq.items()},
        "problems": problems,
    }
    print(json.dumps(result, indent=1))
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out_dir / f"ranks_parallel-{stamp}.json").write_text(json.dumps(result, indent=1) + "\n")
    if problems:
        sys.exit("\n".join(problems))


SCRIPT_ARGS: list[str] = []

if __name__ == "__main__":
    main()
