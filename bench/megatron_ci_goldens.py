"""Megatron-LM's own CI training configurations, traced as its CI runs them, against the GPU
memory its golden values record.

    python bench/megatron_ci_goldens.py --checkout /path/to/Megatron-LM \\
        --python .compat/newest-py3.12/bin/python --jobs 2

Megatron-LM (at a tag such as core_v0.19.0; Python 3.12, torch 2.14, `six` and `triton`
importable; `emerging-optimizers` for the Muon cases, `nvidia-modelopt` and `requests` for the
ModelOpt and Flextron cases) keeps one folder per CI test case under
tests/functional_tests/test_cases/<model>/: `model_config.yaml` (ENV_VARS and MODEL_ARGS) and
`golden_values_dev_dgx_h100.json` (or `_dgx_a100`), whose `mem-allocated-bytes` and
`mem-max-allocated-bytes` its last rank measures with `torch.cuda.memory_allocated()` after each
step and `max_memory_allocated()`. Every
pretraining case of the GPT, MoE, hybrid, BERT and T5 folders (not inference, RL or release
runs) is turned into the command line Megatron's `_run_training.sh` builds (`true` a bare flag,
`[a b]` two values) for the script its recipe names (else its family's: `pretrain_gpt.py`, ...),
with its data, checkpoint and TensorBoard paths under a scratch folder (its BEFORE_SCRIPT
run first, as the CI runs it, with `yq -P` stood in for by PyYAML where yq is absent),
and traced as `memlens run --world-size 8 --rank 7` (one node of 8 GPUs, the last rank; fewer
where the case names GPUS_PER_NODE for its arguments) on the golden file's GPU. Cases whose
arguments only differ in checkpointing or logging are traced once.

Each case is also marked with what Megatron's own CI does with it at the checkout's tag, on the
golden file's GPU (`tests/test_utils/recipes/*/*.yaml`): `runs` (in a scope such as `mr` or
`nightly`), `broken` (only in `*-broken` scopes: Megatron's CI does not expect it to pass, and
its golden values are not kept current) or `unscheduled` (in no recipe for that GPU: the
golden values are from an earlier run). The summary counts all cases and those that run.

Printed and written to bench/results/: per case, the traced peak against the largest
`mem-max-allocated-bytes` (the first traced step's, where the run logs one step), and what
is alive where Megatron-LM logs the second traced step (`training_log`, where the trace ends)
against the last logged `mem-allocated-bytes` (the steady state: with fp16 the first steps are
skipped while the loss scale comes down, before Adam's moments exist), as differences in per
cent; and each failure's last line. A case whose golden values record no memory (the ModelOpt
distillation's hold its losses only) counts as traced and is left out of the comparisons.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import datetime as dt
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
# Each family's script where its recipe names none: the first that the checkout has (0.17 kept
# BERT's and T5's at the top level and called the hybrid one pretrain_mamba.py).
SCRIPTS = {"gpt": ("pretrain_gpt.py",), "moe": ("pretrain_gpt.py",),
           "hybrid": ("pretrain_hybrid.py", "pretrain_mamba.py"),
           "bert": ("examples/bert/pretrain_bert.py", "pretrain_bert.py"),
           "t5": ("examples/t5/pretrain_t5.py", "pretrain_t5.py")}
GOLDENS = ("golden_values_dev_dgx_h100.json", "golden_values_dev_dgx_a100.json")
DEVICES = {"h100": "h100-80gb", "a100": "a100-80gb"}
# What only checkpoints, logs or evaluates: cases that differ in these alone trace the same.
SAME_TRACE = ("--save", "--load", "--ckpt", "--async-save", "--use-persistent-ckpt-worker",
              "--dist-ckpt", "--log-", "--tensorboard", "--non-persistent", "--auto-detect-ckpt",
              "--finetune", "--no-load", "--exit-", "--use-checkpoint", "--data-cache",
              "--wandb", "--timing", "--check-weight-hash", "--record-memory", "--eval-",
              "--seed", "--no-ckpt", "--pretrained-checkpoint")


def pretraining_cases(checkout: Path) -> list[Path]:
    root = checkout / "tests" / "functional_tests" / "test_cases"
    seen, cases = set(), []
    for config in sorted(root.glob("*/*/model_config.yaml")):
        case = config.parent
        if case.parent.name not in SCRIPTS or case.name.endswith("_1node") or \
                "gb200" in case.name or golden_file(case) is None:
            continue
        cfg = yaml.safe_load(config.read_text())
        if cfg.get("MODE") in ("inference", "rl") or "release" in str(cfg.get("TEST_TYPE")):
            continue
        args = {k: v for k, v in (cfg.get("MODEL_ARGS") or {}).items()
                if not k.startswith(SAME_TRACE)}
        key = (case.parent.name, json.dumps(args, sort_keys=True, default=str),
               json.dumps(cfg.get("ENV_VARS"), sort_keys=True, default=str))
        if key not in seen:
            seen.add(key)
            cases.append(case)
    return cases


def ci_status(checkout: Path) -> dict[tuple[str, str], str]:
    """(case name, platform such as dgx_h100) -> 'runs' or 'broken', from the recipes of
    Megatron's CI at the checkout (a pair in none is unscheduled)."""
    scopes: dict[tuple[str, str], set[str]] = {}
    for recipe in sorted((checkout / "tests" / "test_utils" / "recipes").glob("**/*.yaml")):
        spec = yaml.safe_load(recipe.read_text())
        for entry in (spec.get("products") or []) if isinstance(spec, dict) else []:
            for product in entry.get("products") or []:
                for case in entry.get("test_case") or []:
                    for platform in product.get("platforms") or []:
                        scopes.setdefault((case, platform), set()).update(
                            product.get("scope") or [])
    return {key: "runs" if any("broken" not in s for s in found) else "broken"
            for key, found in scopes.items() if found}


@functools.cache
def recipe_scripts(checkout: Path) -> dict[str, str]:
    """Case name -> the training script its recipe runs, where the recipe names one (Flextron's
    cases run megatron/elastification/pretrain_hybrid_flex.py, not pretrain_hybrid.py)."""
    scripts: dict[str, str] = {}
    for recipe in sorted((checkout / "tests" / "test_utils" / "recipes").glob("**/*.yaml")):
        spec = yaml.safe_load(recipe.read_text())
        if not isinstance(spec, dict):
            continue
        found = re.search(r'"TRAINING_SCRIPT_PATH=([\w./-]+\.py)"',
                          str((spec.get("spec") or {}).get("script", "")))
        for entry in spec.get("products") or []:
            for case in entry.get("test_case") or []:
                if found:
                    scripts.setdefault(case, found.group(1).removeprefix("./"))
    return scripts


def golden_file(case: Path) -> Path | None:
    return next((case / g for g in GOLDENS if (case / g).exists()), None)


PATHS = {"DATA_PATH": "data", "DATA_CACHE_PATH": "cache", "OUTPUT_PATH": "out",
         "TENSORBOARD_PATH": "tb", "CHECKPOINT_SAVE_PATH": "ckpt",
         "CHECKPOINT_LOAD_PATH": "ckpt-load"}
# `yq -P` (pretty-print YAML), which BEFORE_SCRIPTs call, where yq is not installed.
YQ = """#!/bin/sh
exec "{python}" -c 'import sys, yaml; print(yaml.safe_dump(yaml.safe_load(sys.stdin)), end="")'
"""


def before_script(cfg: dict, scratch: Path, env: dict) -> None:
    """The case's BEFORE_SCRIPT, run as Megatron's CI runs it before training (the ModelOpt
    distillation case writes its distillation config there), with its paths under
    `scratch`."""
    script = cfg.get("BEFORE_SCRIPT")
    if not script:
        return
    tools = scratch / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "yq").write_text(YQ.format(python=sys.executable))
    (tools / "yq").chmod(0o755)
    paths = {name: str(scratch / sub) for name, sub in PATHS.items()}
    subprocess.run(["bash", "-euc", script], cwd=scratch, check=True, capture_output=True,
                   text=True, env={**env, **paths, "PATH": f"{tools}:{env['PATH']}"})


def command_line(model_args: dict, scratch: Path) -> list[str]:
    """MODEL_ARGS as Megatron's tests/functional_tests/shell_test_utils/_run_training.sh
    passes them; ${...} paths under `scratch`."""
    out: list[str] = []
    for key, value in model_args.items():
        if value is True:
            out.append(key)
            continue
        text = str(value).strip()
        for name, sub in PATHS.items():
            text = text.replace("${" + name + "}", str(scratch / sub))
        text = text.replace("${REPEAT}", "1")
        if text.startswith("[") and text.endswith("]"):
            out += [key, *text[1:-1].split()]
        else:
            out += [key, text]
    return out


def trace(case: Path, checkout: Path, python: str, scratch: Path) -> dict:
    cfg = yaml.safe_load((case / "model_config.yaml").read_text())
    golden = golden_file(case)
    gpu = "a100" if "a100" in golden.name else "h100"
    snapshot = scratch / "snapshot.json"
    env = {**os.environ, **{str(k): str(v) for k, v in (cfg.get("ENV_VARS") or {}).items()},
           "PYTHONPATH": os.pathsep.join(filter(None, (
               os.environ.get("MEMLENS_MEGATRON_LM_DEPS"), str(checkout), str(REPO / "python")))),
           "MEMLENS_WARM_WORKER": "0"}
    # A case may run on fewer GPUs (MODEL_ENV_VARS' GPUS_PER_NODE for MODEL_ARGS, one node):
    # its last rank logs the memory.
    gpus = int(((cfg.get("MODEL_ENV_VARS") or {}).get("MODEL_ARGS") or {}).get(
        "GPUS_PER_NODE", 8))
    script = recipe_scripts(checkout).get(case.name) or next(
        (s for s in SCRIPTS[case.parent.name] if (checkout / s).exists()),
        SCRIPTS[case.parent.name][0])
    cmd = [python, "-m", "memlens", "run", "--device", DEVICES[gpu], "--world-size", str(gpus),
           "--rank", str(gpus - 1), "--progress", "none", "--snapshot", str(snapshot), "--",
           script, *command_line(cfg.get("MODEL_ARGS") or {}, scratch)]
    start = time.monotonic()
    try:
        before_script(cfg, scratch, env)
        run = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True,
                             timeout=1800)
        code, tail = run.returncode, (run.stderr + run.stdout).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        code, tail = -1, ["timed out after 1800 s"]
    except subprocess.CalledProcessError as e:  # the BEFORE_SCRIPT
        code, tail = e.returncode, [f"BEFORE_SCRIPT failed: {(e.stderr or '').strip()[-300:]}"]
    result = {"case": f"{case.parent.name}/{case.name}", "gpu": gpu,
              "wall_s": round(time.monotonic() - start, 1)}
    if code != 0 or not snapshot.exists():
        return {**result, "error": tail[0] if tail else f"exit status {code}"}
    snap = json.loads(snapshot.read_text())
    device = snap["meta"]["device_key"]
    # An abandoned replay costs a second, full trace (the numbers are the full trace's).
    replay = snap["meta"].get("layer_replay") or {}
    if replay.get("abandoned"):
        result["replay_abandoned"] = replay["abandoned"]
    why = sorted({g["traced_in_full"] for g in replay.get("groups", ()) if "traced_in_full" in g})
    result["replay"] = replay.get("abandoned") or replay.get("off") or (
        f"{replay.get('replayed_forward', 0)} forward, {replay.get('replayed_backward', 0)} "
        "backward block calls replayed" + (f" (traced in full: {'; '.join(why)})" if why else "")
        + ("" if replay.get("groups") else " (no group of 5 blocks alike)"))
    phases = {p["name"]: p for p in snap["phases"] if p["device"] == device}
    values = json.loads(golden.read_text())
    peaks = values.get("mem-max-allocated-bytes", {}).get("values", {})
    after = values.get("mem-allocated-bytes", {}).get("values", {})
    logged = [k for k, v in peaks.items() if isinstance(v, (int, float))]
    peak = snap["summary"]["peak_bytes"]
    if len(logged) == 1:  # a one-step run (--train-iters 1): the first traced step's peak
        peak = max(p["peak_bytes"] for name, p in phases.items()
                   if not name.split("_iter_")[-1].isdigit() or name.endswith("_iter_0"))
    # After the last step traced: the second, or with TE's CUDA graphs the first graphed one.
    steps = [name for name in phases if name.startswith("optimizer_step_iter_")]
    result.update(peak=peak,
                  after=phases[steps[-1]]["current_after_bytes"] if len(steps) > 1 else None,
                  golden_peak=max((v for v in peaks.values() if isinstance(v, (int, float))),
                                  default=None),
                  golden_after=_last(after))
    for name in ("peak", "after"):
        if result[name] and result[f"golden_{name}"]:
            result[f"{name}_diff_pct"] = round(
                100 * (result[name] - result[f"golden_{name}"]) / result[f"golden_{name}"], 2)
    return result


def _last(values: dict):
    """The last logged value: the steady state a trace models (fp16's first steps are
    skipped while its loss scale comes down, so Adam's moments do not exist yet)."""
    steps = [k for k, v in values.items() if isinstance(v, (int, float))]
    return values[max(steps, key=int)] if steps else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a Megatron-LM checkout")
    parser.add_argument("--python", default=sys.executable,
                        help="an interpreter with megatron's dependencies and torch 2.14")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", default="", help="cases whose name contains this")
    args = parser.parse_args()
    cases = [c for c in pretraining_cases(args.checkout) if args.only in c.name]
    status = ci_status(args.checkout)
    print(f"{len(cases)} pretraining cases", flush=True)
    with tempfile.TemporaryDirectory() as tmp, futures.ThreadPoolExecutor(args.jobs) as pool:
        jobs = [pool.submit(trace, c, args.checkout, args.python, Path(tmp) / c.name)
                for c in cases]
        results = []
        for job in futures.as_completed(jobs):
            r = job.result()
            r["ci"] = status.get((r["case"].split("/")[-1], f"dgx_{r['gpu']}"), "unscheduled")
            results.append(r)
            print(f"{r['case']:100} {r['ci']:12} " + (
                f"FAILED: {r['error'][:200]}" if "error" in r else
                "traced; its golden values record no memory" if r.get("golden_peak") is None
                else f"peak {r.get('peak_diff_pct')} %, after step {r.get('after_diff_pct')} %")
                + (f"; layer replay: {r['replay']}" if "replay" in r else ""), flush=True)
    for label, chosen in (("all cases", results),
                          ("cases Megatron's CI runs", [r for r in results if r["ci"] == "runs"])):
        traced = [r for r in chosen if "error" not in r]
        peaks = [r for r in traced if r.get("peak_diff_pct") is not None]
        within = [r for r in peaks if abs(r["peak_diff_pct"]) <= 3
                  and abs(r.get("after_diff_pct") or 0) <= 3]
        print(f"{label}: traced {len(traced)} of {len(chosen)}; within 3 % of both golden "
              f"values: {len(within)}; peak within 1 %: "
              f"{sum(abs(r['peak_diff_pct']) <= 1 for r in peaks)} of {len(peaks)}, within 3 %: "
              f"{sum(abs(r['peak_diff_pct']) <= 3 for r in peaks)}; layer replay abandoned "
              f"(traced twice): {sum('replay_abandoned' in r for r in traced)}")
    out = REPO / "bench" / "results" / f"megatron_ci_goldens-{dt.date.today()}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(sorted(results, key=lambda r: r["case"]), indent=1))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
