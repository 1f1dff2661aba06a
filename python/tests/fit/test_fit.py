"""`memlens fit` end to end: a search over micro-batch x recompute x TP of a small GPT
(scripts/fit_gpt.py) whose frontier is derived from the formulas below; pruning counted in
traces; the same search on a local Ray cluster; an interrupted search resumed; a worker that
dies retried once.

The peak of one training step of fit_gpt.py, bf16 everywhere, micro-batch b, TP degree t
(s = 8192, h = 4096, a = 32 heads, L = 4 blocks, V = 8192), comes at the attention backward of
the last block (the first block backward reaches):
- model: weights, AdamW's exp_avg and exp_avg_sq, 2 bytes each (6 B per parameter; the blocks'
  12h² per block split over t, embedding and head Vh each replicated), the causal masks (s² bool
  per block), and the gradients made by then (the head's, the last block's MLP's);
- activations per sample: each block saves sbh(8 + 24/t) + 2as²/t bytes (replicated: the
  inputs of ln_1, q/k/v, ln_2, fc; split: q, k, v, the attention output, fc's output and
  GELU's; and the softmax output), the last block's MLP part sbh(4 + 16/t) is already freed,
  and the softmax backward holds two more as² tensors (the gradients of the probabilities and
  of the scores): 2·2as²/t;
- full recompute keeps 2sbh per block (its input) and rebuilds one block's activations at a time.
The formula holds within 10 % of the traced peak. The verdict is on reserved memory plus what is
outside the allocator (under 1 GiB): the caching allocator's segments hold up to 25 % more than
the allocated peak for tensors of this size, so a point fits for sure when 1.1 · 1.25 · formula
+ 1 GiB is within the card, and is out of memory for sure when 0.9 · formula is beyond it.
The space is chosen so that every point is one or the other.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.paths import REPO, TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = str(TESTS / "scripts" / "fit_gpt.py")
S, H, A, L, V = 8192, 4096, 32, 4, 8192
SBH, AS2 = S * H, A * S * S  # per sample
MiB, GiB = 2**20, 2**30
CARD = 95830 * MiB  # h100-94gb


def model_bytes(t: int) -> float:
    params = L * 12 * H * H / t + 2 * V * H + (4 * L + 2) * H
    return 6 * params + L * S * S + 2 * (V * H + 8 * H * H / t)


def per_sample(recompute: str, t: int) -> float:
    saved = SBH * (8 + 24 / t) + 2 * AS2 / t
    mlp = SBH * (4 + 16 / t)
    softmax_backward = 2 * 2 * AS2 / t
    if recompute == "none":
        return L * saved - mlp + softmax_backward
    return L * 2 * SBH + saved - mlp + softmax_backward  # full


def formula(point: dict) -> float:
    t = int(point["tp"])
    return model_bytes(t) + int(point["micro-batch"]) * per_sample(point["recompute"], t)


def expected_verdict(point: dict) -> str:
    f = formula(point)
    if 1.1 * 1.25 * f + GiB <= CARD:
        return "fits"
    assert 0.9 * f > CARD, f"{point}: {f / GiB:.1f} GiB is too near the card to tell"
    return "oom"


FIT = ["fit", "--device", "h100-94gb", "--gpus", "2", "--micro-batch", "1,2,4,8",
       "--recompute", "none,full", "--axis", "micro-batch=--batch-size",
       "--axis", "recompute=--recompute", "--json"]
GRID = FIT + ["--tp", "1,2", "--axis", "tp=--tp", "--sort", "micro-batch"]


def keys(rows) -> set[str]:
    return {r["key"] for r in rows}


def expected_sets(document) -> tuple[set[str], set[str]]:
    fits = {r["key"] for r in document["rows"] if expected_verdict(r["point"]) == "fits"}
    return fits, {r["key"] for r in document["rows"]} - fits


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fit")
    run_dir = tmp / "run"
    out = run_memlens(*GRID, "--jobs", "1", "--run-dir", str(run_dir), "--", SCRIPT, cwd=tmp,
                      timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout), run_dir, tmp


def test_the_frontier_is_the_one_the_formulas_give(grid):
    doc, _, _ = grid
    fits, oom = expected_sets(doc)
    # (none, tp 1) fits up to micro-batch 2, (full, tp 1) and (none, tp 2) up to 4, (full, tp 2)
    # up to 8
    assert len(fits) == 12 and len(oom) == 4
    assert keys(doc["frontier"]) == fits
    assert keys(doc["excluded"]) == oom
    for row in doc["rows"]:
        if row.get("peak_bytes") is not None:
            expected = formula(row["point"])
            assert abs(row["peak_bytes"] - expected) <= 0.10 * expected, row
            assert row["headroom_bytes"] == CARD - (row["reserved_peak_bytes"]
                                                    + row["outside_allocator_bytes"]) \
                or row["verdict"] == "oom"  # after an OOM: what the step needs, unlimited
            assert row["device_total_bytes"] == CARD
    # --sort micro-batch: the largest first, then fewer GPUs (all 2), less recompute, lower
    # peak (tp 2 below tp 1); micro-batch 1 is implied everywhere (no peak): in the space's order
    assert [(r["point"]["micro-batch"], r["point"]["recompute"], r["point"]["tp"])
            for r in doc["frontier"]] == [
        ("8", "full", "2"), ("4", "none", "2"), ("4", "full", "2"), ("4", "full", "1"),
        ("2", "none", "2"), ("2", "none", "1"), ("2", "full", "2"), ("2", "full", "1"),
        ("1", "none", "1"), ("1", "none", "2"), ("1", "full", "1"), ("1", "full", "2")]


def test_pruning_is_counted_in_traces(grid):
    doc, run_dir, _ = grid
    # test_fit_search.py follows the same search step by step: of 16 points, 11 are traced;
    # micro-batch 1 of each line is settled by the fit at 2 (implied); (none, tp 1) at 8 is
    # pruned by (none, tp 2) at 8, which is OOM
    assert {k: doc["counts"][k] for k in ("points", "traced", "pruned", "implied", "resumed")} \
        == {"points": 16, "traced": 11, "pruned": 1, "implied": 4, "resumed": 0}
    pruned = next(r for r in doc["excluded"] if r["source"] == "pruned")
    assert pruned["key"] == "gpus=2,micro-batch=8,recompute=none,tp=1"
    assert pruned["by"] == "gpus=2,micro-batch=8,recompute=none,tp=2"
    assert pruned["reason"].startswith("OOM: pruned, needs at least as much as gpus=2,"
                                       "micro-batch=8,recompute=none,tp=2, which is OOM by ")
    # only distinct ranks: the data-parallel ranks of tp 1 are alike, the two TP ranks are not
    traced = [r for r in doc["rows"] if r["source"] == "traced"]
    assert sorted(r["ranks_traced"] for r in traced) == [1] * 5 + [2] * 6
    # one worker each: a result and a snapshot per traced point in the run folder
    assert len(list(run_dir.glob("points/*/result.json"))) == 11
    assert len(list(run_dir.glob("points/*/snapshot.json"))) == 11
    assert len(list(run_dir.glob("points/*/snapshot.ranks/rank-1.json"))) == 6


def test_reasons_say_by_how_much_and_the_page_plots_each_axis(grid):
    doc, run_dir, _ = grid
    traced_oom = [r for r in doc["excluded"] if r["source"] == "traced"]
    for r in traced_oom:
        assert r["reason"].startswith("OOM by ") and "(traced)" in r["reason"]
        assert r["headroom_bytes"] < 0
    page = Path(doc["html"]).read_text()
    assert Path(doc["html"]) == run_dir / "fit.html"
    assert page.count("<svg") == 3  # micro-batch, recompute, tp (gpus has one value)
    assert page.count("device memory") == 3
    assert "<script>" not in page, page[page.index("<script>") - 300:][:600]
    assert "default-src 'none'" in page


def test_the_same_command_again_traces_nothing(grid):
    doc, run_dir, tmp = grid
    out = run_memlens(*GRID, "--jobs", "1", "--run-dir", str(run_dir), "--", SCRIPT, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    again = json.loads(out.stdout)
    assert (again["counts"]["traced"], again["counts"]["resumed"]) == (0, 11)
    assert keys(again["frontier"]) == keys(doc["frontier"])


def test_a_local_ray_cluster_finds_the_same_frontier(grid, tmp_path, monkeypatch, capsys):
    ray = pytest.importorskip("ray")
    doc, _, _ = grid
    monkeypatch.chdir(tmp_path)
    # the cluster's workers import this checkout's memlens
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH", "")) if p))
    from memlens.cli import main

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        status = main([*GRID, "--ray", "auto", "--run-dir", str(tmp_path / "run"), "--", SCRIPT])
    finally:
        ray.shutdown()
    assert status == 0
    found = json.loads(capsys.readouterr().out)
    assert found["runner"].startswith("Ray (2 tasks at a time")
    assert keys(found["frontier"]) == keys(doc["frontier"])
    assert keys(found["excluded"]) == keys(doc["excluded"])
    c = found["counts"]
    # two lines at a time: a trace may start before the result that would have pruned it
    assert c["traced"] >= 11 and c["traced"] + c["pruned"] + c["implied"] == 16
    assert len(list((tmp_path / "run").glob("points/*/result.json"))) == c["traced"]
    assert len(list((tmp_path / "run").glob("points/*/snapshot.json"))) == c["traced"]


def test_an_interrupted_search_resumes_without_tracing_again(tmp_path):
    run_dir = tmp_path / "run"
    argv = [*FIT, "--jobs", "1", "--run-dir", str(run_dir), "--", SCRIPT]  # tp 1 only
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH", "")) if p)}
    driver = subprocess.Popen([sys.executable, "-m", "memlens", *argv], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 900
    while len(list(run_dir.glob("points/*/result.json"))) < 2:
        assert driver.poll() is None and time.time() < deadline, driver.communicate()
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)  # half-way: (full) at 2 and 4 are done, 8 is running
    stdout, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr[-3000:]
    first = json.loads(stdout)
    assert first["interrupted"] is True
    finished = len(list(run_dir.glob("points/*/result.json")))
    assert finished == first["counts"]["traced"] == 2
    out = run_memlens(*argv, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    # the uninterrupted search traces 5: (full) 2, 4, 8; (none) 2, 4 (8 is pruned by full's 8)
    assert (doc["counts"]["resumed"], doc["counts"]["traced"]) == (2, 3)
    assert keys(doc["frontier"]) == {r["key"] for r in doc["rows"]
                                     if expected_verdict({**r["point"], "tp": "1"}) == "fits"}


def test_a_dead_worker_is_traced_once_more_and_a_script_error_is_not(tmp_path):
    log = tmp_path / "runs.log"
    out = run_memlens("fit", "--arg", "--mode=killed,raise", "--json", "--jobs", "1",
                      "--run-dir", str(tmp_path / "run"), "--",
                      str(TESTS / "scripts" / "fit_failures.py"), cwd=tmp_path,
                      env={"RUN_LOG": str(log)})
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert sorted(log.read_text().split()) == ["killed", "killed", "raise"]
    reasons = {r["point"]["--mode"]: (r["attempts"], r["reason"]) for r in doc["excluded"]}
    assert reasons["killed"][0] == 2
    assert reasons["killed"][1].startswith("the trace failed (2 tries): the trace's worker "
                                           f"exited with status {-signal.SIGKILL}")
    script = TESTS / "scripts" / "fit_failures.py"
    assert reasons["raise"] == (1, f"the script's error: {script}:14: {script} raised "
                                "ValueError: the batch does not divide the number of GPUs")
    # the dead worker left no result: the same command traces it again
    assert len(list((tmp_path / "run").glob("points/*/result.json"))) == 1


def test_a_megatron_launch_script_gets_megatrons_flags(tmp_path):
    launch = TESTS / "scripts" / "launch"
    out = run_memlens("fit", "--gpus", "4", "--micro-batch", "3", "--json", "--jobs", "1",
                      "--from-script", str(launch / "megatron_style.sh"), "--", "ckpt", "128",
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    [row] = doc["rows"]
    assert (row["key"], row["verdict"], row["source"]) == ("gpus=4,micro-batch=3", "fits",
                                                           "traced")
    report = json.loads((tmp_path / "logs" / "report-0.json").read_text())
    # --micro-batch-size replaced where the launch line has it; --gpus 4 over the line's 2 x 4
    assert report["argv"] == [
        "--num-layers", "2", "--hidden-size", "128", "--ffn-hidden-size", "512",
        "--micro-batch-size", "3", "--global-batch-size", "16", "--train-iters", "100",
        "--save", "ckpt", "--report", str(tmp_path / "logs" / "report-{rank}.json")]
    assert (report["world"], report["WORLD_SIZE"], report["LOCAL_WORLD_SIZE"]) == (4, "4", "4")
    # the shell script ran once, when the job was recorded
    assert (tmp_path / "logs" / "launches.log").read_text() == "launching on 8 GPUs\n"
