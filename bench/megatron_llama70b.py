"""One rank of a Llama-2-70B-shaped Megatron job, traced: wall time and host memory.

    .venv/bin/python bench/megatron_llama70b.py               # rank 0 (first pipeline stage)
    .venv/bin/python bench/megatron_llama70b.py --rank 63 --runs 3

The job: 64 GPUs (8 nodes x 8), tensor parallel 8, pipeline parallel 4, data parallel 2,
sequence parallel, sequence 4096, micro-batch 1, bf16, distributed optimizer; Llama-2-70B's
shape (80 layers, hidden 8192, SwiGLU 28672, 64 heads / 8 KV groups, vocabulary 32,000),
built with megatron.core alone (examples/megatron-lm/core_llama.py, the Transformer Engine layer
spec without TE installed). Each run is `memlens run --world-size 64 --rank R` in a fresh
process (fake CUDA loaded, megatron imported and traced for two iterations, snapshot written)
and is measured from outside: wall time, and the process's peak resident set (getrusage).

Targets: under 60 s and under 4 GiB of RSS per rank. Results go to bench/results/.
`--compare` runs each trace twice in turn, with layer replay (the default) and with
`--no-layer-replay`: the ratio of their wall times, and the same device peak from both.
`--warm` forks each trace from the warm worker, as the editor, `--ranks all` and `memlens fit`
do (worker/warm.py: torch and memlens already imported; its start is not timed), and measures
wall time only (the forked trace is not this process's child).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "megatron-lm" / "core_llama.py"
LAYOUT = ["--tp", "8", "--pp", "4", "--sp", "--distributed-optimizer"]
SHAPE = ["--layers", "80", "--hidden", "8192", "--ffn", "28672", "--heads", "64",
         "--kv-heads", "8", "--seq", "4096", "--micro-batch", "1", "--vocab", "32000"]
TARGET_S, TARGET_RSS = 60.0, 4 * 2**30


def run_once(rank: int, tmp: Path, replay: bool = True) -> dict:
    snapshot = tmp / f"rank-{rank}.json"
    env = _env()
    argv = [sys.executable, "-m", "memlens", "run", "--world-size", "64", "--nproc-per-node",
            "8", "--rank", str(rank), "--json", "--progress", "none", "--snapshot",
            str(snapshot), *([] if replay else ["--no-layer-replay"]), "--", str(SCRIPT),
            *LAYOUT, *SHAPE]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"trace failed:\n{stderr[-3000:]}")
    summary = json.loads(stdout.strip().splitlines()[-1])
    meta = json.loads(snapshot.read_text())["meta"]
    return {"rank": rank, "layer_replay": replay, "wall_s": round(wall, 2),
            "peak_bytes": summary["peak_bytes"],
            "reserved_peak_bytes": summary.get("reserved_peak_bytes"),
            "trace_s": meta["duration_s"],
            "replayed": meta["layer_replay"].get("replayed_forward", 0)}


def run_warm(rank: int, tmp: Path, replay: bool = True) -> dict:
    """One trace forked from the warm worker (started and ready beforehand)."""
    from memlens.worker import warm

    snapshot = tmp / f"rank-{rank}.json"
    argv = [sys.executable, "-m", "memlens", "run", "--world-size", "64", "--nproc-per-node",
            "8", "--rank", str(rank), "--json", "--progress", "none", "--snapshot",
            str(snapshot), *([] if replay else ["--no-layer-replay"]), "--", str(SCRIPT),
            *LAYOUT, *SHAPE]
    process = warm.worker_process(argv, str(tmp), _env())
    if not isinstance(process, warm.ForkedWorkerProcess):
        sys.exit("the warm worker did not start")
    start = time.perf_counter()
    process.start()
    ended = process.wait()
    wall = time.perf_counter() - start
    process.stop()
    if ended.returncode != 0:
        sys.exit(f"trace failed (exit {ended.returncode})")
    summary = json.loads(ended.stdout.strip().splitlines()[-1])
    meta = json.loads(snapshot.read_text())["meta"]
    return {"rank": rank, "layer_replay": replay, "warm": True, "wall_s": round(wall, 2),
            "peak_bytes": summary["peak_bytes"], "trace_s": meta["duration_s"],
            "replayed": meta["layer_replay"].get("replayed_forward", 0), "max_rss_bytes": 0}


def rss(run: dict) -> str:
    """The trace's peak resident set, where it was measured (not for a warm run)."""
    return "" if run.get("warm") else f"max RSS {run['max_rss_bytes'] / 2**30:.2f} GiB, "


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH"))
                                        if p)
    return env


def measure(rank: int, tmp: Path, replay: bool = True) -> dict:
    """run_once in a forked child: wait4 reports the largest resident set of the child and its
    reaped descendants, which is the trace process's (each run measured on its own)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: run the trace (a grandchild) and report
        os.close(read)
        result = run_once(rank, tmp, replay)
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        sys.exit("measurement failed")
    result = json.loads(data)
    result["max_rss_bytes"] = usage.ru_maxrss * 1024  # Linux: KiB; the largest descendant
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--compare", action="store_true",
                    help="each run also without layer replay, in turn")
    ap.add_argument("--warm", action="store_true", help="fork each trace from the warm worker")
    args = ap.parse_args()
    modes = (True, False) if args.compare else (True,)
    if args.warm:
        sys.path.insert(0, str(REPO / "python"))
        from memlens.worker import warm

        server = warm.prestart(sys.executable, _env())
        if server is None or not server.ready():
            sys.exit("the warm worker did not start")
    one = run_warm if args.warm else measure
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one(args.rank, Path(tmp), replay) for _ in range(args.runs)
                for replay in modes]
    for r in runs:
        print(f"rank {r['rank']}{'' if r['layer_replay'] else ' (--no-layer-replay)'}"
              f"{' (warm)' if r.get('warm') else ''}: "
              f"{r['wall_s']:.1f} s wall ({r['trace_s']:.1f} s traced, {r['replayed']} layer "
              f"forwards replayed), {rss(r)}device peak "
              f"{r['peak_bytes'] / 2**30:.1f} GiB allocated")
    if args.compare:
        for on, off in zip(runs[::2], runs[1::2]):
            same = on["peak_bytes"] == off["peak_bytes"]
            print(f"with replay / without: {on['wall_s'] / off['wall_s']:.2f}x wall, "
                  f"{on['trace_s'] / off['trace_s']:.2f}x traced; "
                  f"peak {'the same' if same else 'DIFFERS'}")
            if not same:
                return 1
    ok = all(r["wall_s"] < TARGET_S and r["max_rss_bytes"] < TARGET_RSS for r in runs)
    print("targets (< 60 s, < 4 GiB RSS):", "met" if ok else "MISSED")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    record = {"date": dt.date.today().isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "load_average": os.getloadavg(), "runs": runs}
    (out / f"megatron_llama70b-{dt.datetime.now():%Y%m%d-%H%M%S}.json").write_text(
        json.dumps(record, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
