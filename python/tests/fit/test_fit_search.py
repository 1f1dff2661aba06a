"""`memlens fit`'s search without tracing: the space, the bisection and pruning (counted against
an oracle of which points fit), the job's flags per point, the frontier's order."""

import pytest

from memlens.errors import MemlensError
from memlens.fit import report
from memlens.fit.axes_from_options import build_space
from memlens.fit.command import protect_values
from memlens.fit.script_flags import apply_point, set_flag
from memlens.fit.search import Search
from memlens.fit.space import Axis, Space, Target
from memlens.targets.job import Job
from memlens.targets.script import ScriptTarget


def axis(name, values, direction):
    return Axis(name, tuple(values), Target("flag", f"--{name}"), direction)


def run(search: Search, fits) -> list[str]:
    """Trace one point at a time as the search asks; the oracle `fits(point)` answers."""
    axes = search.space.axes
    order = []
    while not search.done():
        p = search.next_point()
        search.start(p)
        order.append(p.key(axes))
        search.record(p, {"status": "ok", "fits": fits(dict(zip([a.name for a in axes],
                                                                 p.values)))})
    return order


def test_a_monotone_axis_is_bisected():
    space = Space([axis("micro-batch", ["1", "2", "4", "8", "16", "32", "64"], "up")])
    order = run(Search(space), lambda p: int(p["micro-batch"]) <= 8)
    # middle of 7 is 8 (fits: 1, 2, 4 fit too), middle of 16, 32, 64 is 32 (OOM: 64 is too),
    # then 16: 3 traces instead of 7
    assert order == ["micro-batch=8", "micro-batch=32", "micro-batch=16"]
    s = Search(space)
    run(s, lambda p: int(p["micro-batch"]) <= 8)
    verdicts = {p.values[0]: (o.verdict, o.traced, o.by and o.by.values[0])
                for p, o in s.outcomes.items()}
    assert verdicts == {"1": ("fits", False, "8"), "2": ("fits", False, "8"),
                        "4": ("fits", False, "8"), "8": ("fits", True, None),
                        "16": ("oom", True, None), "32": ("oom", True, None),
                        "64": ("oom", False, "32")}


# micro-batch x recompute x tp, with the frontier of test_fit.py: the largest micro-batch that
# fits at each (recompute, tp)
LARGEST = {("none", "1"): 2, ("full", "1"): 4, ("none", "2"): 4, ("full", "2"): 8}


def grid():
    return Space([axis("micro-batch", ["1", "2", "4", "8"], "up"),
                  axis("recompute", ["none", "full"], "down"), axis("tp", ["1", "2"], "down")])


def oracle(p):
    return int(p["micro-batch"]) <= LARGEST[(p["recompute"], p["tp"])]


def test_lines_are_bisected_from_the_least_hungry_and_oom_prunes_across_them():
    order = run(Search(grid()), oracle)
    # Lines (recompute, tp) from the least memory-hungry: (full, 2); then (full, 1) and
    # (none, 2) taking turns (a tie, by the space's order); then (none, 1). Each line starts at
    # its middle micro-batch, 2; the fits it finds settle micro-batch 1 without a trace.
    # (none, 2) at 8 is OOM, which prunes (none, 1) at 8: (none, 1) bisects 1, 2, 4 only.
    assert order == [
        "micro-batch=2,recompute=full,tp=2", "micro-batch=4,recompute=full,tp=2",
        "micro-batch=8,recompute=full,tp=2",
        "micro-batch=2,recompute=none,tp=2", "micro-batch=2,recompute=full,tp=1",
        "micro-batch=4,recompute=none,tp=2", "micro-batch=4,recompute=full,tp=1",
        "micro-batch=8,recompute=none,tp=2", "micro-batch=8,recompute=full,tp=1",
        "micro-batch=2,recompute=none,tp=1", "micro-batch=4,recompute=none,tp=1"]


def test_without_pruning_every_point_is_traced_and_all_fits_traces_the_fits():
    assert len(run(Search(grid(), prune=False), oracle)) == 16
    s = Search(grid(), all_fits=True)
    order = run(s, oracle)
    fitting = [k for k, o in s.outcomes.items() if o.verdict == "fits"]
    assert len(fitting) == 12 and all(s.outcomes[p].traced for p in fitting)
    # the OOM points: (none, 1) at 4 is traced, 8 is pruned by it; (full, 1) at 8 and
    # (none, 2) at 8 are traced (nothing below them is OOM): 12 + 3
    assert len(order) == 15
    pruned = [p.key(s.space.axes) for p, o in s.outcomes.items() if not o.traced]
    assert pruned == ["micro-batch=8,recompute=none,tp=1"]


def test_a_script_error_settles_nothing_else():
    space = Space([axis("micro-batch", ["1", "2", "4"], "up")])
    s = Search(space)
    p = s.next_point()
    assert p.values == ("2",)
    s.start(p)
    s.record(p, {"status": "error", "error": {"message": "boom"}})
    assert len(s.outcomes) == 1
    assert sorted(q.values[0] for q in [s.next_point()]) == ["1"]


def test_one_trace_per_line_at_a_time():
    s = Search(grid())
    first = s.next_point()
    s.start(first)
    second = s.next_point()
    s.start(second)
    assert first.values[1:] != second.values[1:]  # another line
    for _ in range(2):
        s.start(s.next_point())
    assert s.next_point() is None  # four lines, four running: wait for one


def job(*args, path="train.py"):
    return Job(ScriptTarget(path=path, args=list(args)))


class Args:
    def __init__(self, **kw):
        for name in ("gpus", "micro_batch", "seq", "recompute", "tp", "pp", "zero", "fsdp",
                     "fp8", "axis", "arg", "env", "monotone"):
            setattr(self, name, kw.get(name))


def test_a_plain_script_names_its_flags():
    with pytest.raises(MemlensError, match="--axis micro-batch=--the-flag"):
        build_space(Args(micro_batch="1,2"), {}, job())
    space = build_space(Args(micro_batch="4,1,2", axis=["micro-batch=--batch-size"],
                             arg=["--seq-len=1024,512"], env=["NCCL_ALGO=ring,tree"]),
                        {}, job("--batch-size", "8", "--lr=3e-4"))
    assert [(a.name, a.values, a.direction) for a in space.axes] == [
        ("micro-batch", ("1", "2", "4"), "up"),
        ("--seq-len", ("1024", "512"), "none"), ("NCCL_ALGO", ("ring", "tree"), "none")]
    point = next(p for p in space.points if p.values == ("2", "512", "tree"))
    j = apply_point(job("--batch-size", "8", "--lr=3e-4"), space.axes, point)
    assert j.target.args == ["--batch-size", "2", "--lr=3e-4", "--seq-len=512"]
    assert j.target.env == {"NCCL_ALGO": "tree"}


def test_monotone_orders_a_generic_axis_numerically():
    space = build_space(Args(arg=["--seq-len=4096,1024,2048"], monotone=["--seq-len=up"]),
                        {}, job())
    assert space.axes[0].values == ("1024", "2048", "4096")
    assert space.primary() == 0
    with pytest.raises(MemlensError, match="no such axis"):
        build_space(Args(arg=["--x=1"], monotone=["--y=up"]), {}, job())


def test_megatron_scripts_get_megatron_flags():
    megatron = job("--tensor-model-parallel-size", "8", "--micro-batch-size", "1",
                   "--recompute-activations", "--use-distributed-optimizer",
                   path="pretrain_gpt.py")
    space = build_space(Args(gpus="64", micro_batch="2", tp="4", recompute="full", zero="0",
                             fp8="on"), {}, megatron)
    j = apply_point(megatron, space.axes, space.points[0])
    assert j.world_size == 64
    assert j.target.args == ["--tensor-model-parallel-size", "4", "--micro-batch-size", "2",
                             "--recompute-granularity", "full", "--recompute-method", "uniform",
                             "--recompute-num-layers", "1", "--fp8-format", "hybrid"]
    with pytest.raises(MemlensError, match="distributed optimizer"):
        space = build_space(Args(zero="3"), {}, megatron)
        apply_point(megatron, space.axes, space.points[0])


def test_a_toml_table_gives_the_space_and_the_command_line_wins():
    config = {"micro-batch": [1, 2, 4], "axis": {"micro-batch": "--bs"}, "env": {"SEQ": [1, 2]}}
    space = build_space(Args(micro_batch="8"), config, job())
    assert [(a.name, a.values) for a in space.axes] == [("micro-batch", ("8",)),
                                                        ("SEQ", ("1", "2"))]


def test_set_flag_replaces_in_place_and_removes_repeats():
    args = ["--bs=1", "--x", "--bs", "3", "--y", "2"]
    set_flag(args, "--bs", "8")
    assert args == ["--bs=8", "--x", "--y", "2"]


def test_values_that_start_with_dashes_reach_the_parser():
    assert protect_values(["fit", "--arg", "--bs=1,2", "--", "t.py", "--arg", "x"]) == [
        "fit", "--arg=--bs=1,2", "--", "t.py", "--arg", "x"]


def test_the_frontier_sorts_by_the_chosen_key_then_the_others():
    rows = [{"point": {"micro-batch": mb, "recompute": rc}, "gpus": g, "verdict": "fits",
             "peak_bytes": peak}
            for mb, rc, g, peak in (("2", "full", 8, 30), ("4", "full", 8, 50),
                                    ("2", "none", 16, 40), ("1", "none", 8, 20))]
    key = lambda rows: [(r["point"]["micro-batch"], r["point"]["recompute"], r["gpus"])
                        for r in rows]
    assert key(report.frontier(rows, "peak")) == [("1", "none", 8), ("2", "full", 8),
                                                  ("2", "none", 16), ("4", "full", 8)]
    # most micro-batch first; ties: fewer GPUs, then less recompute
    assert key(report.frontier(rows, "micro-batch")) == [("4", "full", 8), ("2", "full", 8),
                                                         ("2", "none", 16), ("1", "none", 8)]
    # no recompute first; ties: fewer GPUs, then more micro-batch
    assert key(report.frontier(rows, "recompute")) == [("1", "none", 8), ("2", "none", 16),
                                                       ("4", "full", 8), ("2", "full", 8)]


def test_a_run_folder_keeps_results_and_refuses_another_search(tmp_path):
    from memlens.fit.run_dir import RunDir

    first = RunDir(tmp_path / "run", {"space": [1]})
    first.save_index({"rows": []})
    first.save_result("p", "micro-batch=1", {"status": "ok", "fits": True})
    again = RunDir(tmp_path / "run", {"space": [1]})
    assert again.finished("p", "micro-batch=1") == {"status": "ok", "fits": True}
    assert again.finished("p", "micro-batch=2") is None  # another point's folder name
    with pytest.raises(MemlensError, match="holds another search"):
        RunDir(tmp_path / "run", {"space": [2]})


def test_the_page_escapes_what_the_job_names():
    from memlens.fit.html_page import render

    hostile = "<img src=x onerror=alert(1)>"
    row = {"key": f"x={hostile}", "point": {"x": hostile}, "verdict": "fits", "gpus": 1,
           "peak_bytes": 2 * GiB, "reserved_peak_bytes": 3 * GiB, "headroom_bytes": 5 * GiB,
           "device_total_bytes": 10 * GiB, "worst_rank": 0, "reason": "fits"}
    doc = {"rows": [row, {**row, "point": {"x": "b"}, "key": "x=b"}], "frontier": [row],
           "excluded": [], "device_total_bytes": 10 * GiB, "device": "h100-80gb",
           "target": hostile, "space": [{"name": "x", "values": [hostile, "b"]}],
           "counts": {"points": 2, "fits": 2, "oom": 0, "errors": 0, "traced": 2, "resumed": 0,
                      "pruned": 0, "implied": 0}}
    page = render(doc)
    assert hostile not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<svg") == 1 and "device memory" in page
    # nothing runs, nothing is fetched: the style is allowed by its hash
    assert "content=\"default-src 'none'; style-src 'sha256-" in page and "<script>" not in page


GiB = 2**30
