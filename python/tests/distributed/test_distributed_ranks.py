"""`memlens run --ranks all`: ranks grouped by role, traced in parallel workers, a per-rank
table, one snapshot per traced rank and an index naming them."""

import json
import textwrap
import threading
import time

import pytest

from support.runs import run_memlens
from memlens.distributed.roles import chunk_length, compact, group_ranks
from support.lsp import pid_alive
from support.ranks import DEVICE, SCRIPTS, model_state_bytes

pytestmark = pytest.mark.slow  # traces in fresh processes


def _all(tmp_path, world, script, *args, jobs="2", relative=False):
    """`relative`: the script named from its own folder, the command's working directory."""
    snap = tmp_path / "job.json"
    out = run_memlens("run", "--device", DEVICE, "--world-size", str(world), "--ranks", "all",
                      "--jobs", jobs, "--snapshot", str(snap), "--",
                      script if relative else str(SCRIPTS / script), *args,
                      cwd=SCRIPTS if relative else tmp_path)
    index_path = tmp_path / "job.ranks" / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else None
    return out, index


def test_fsdp_job_groups_ranks_prints_the_table_and_indexes_snapshots(tmp_path):
    out, index = _all(tmp_path, 8, "fsdp2_train.py")
    assert out.returncode == 0, out.stderr[-3000:]
    # 1,003 rows over 8 ranks: ranks 0-6 hold 126 of them, rank 7 holds 121: two roles.
    rows = {r["rank"]: r for r in index["ranks"]}
    assert sorted(rows) == [0, 7]
    assert rows[0]["alike"] == [0, 1, 2, 3, 4, 5, 6] and rows[7]["alike"] == [7]
    assert (rows[0]["role"], rows[7]["role"]) == ("dp 0/8", "dp 7/8")
    assert index["world_size"] == 8 and index["worst_rank"] == 0
    assert rows[0]["peak_bytes"] > rows[7]["peak_bytes"]  # more optimizer state on rank 0
    for r in rows.values():
        snap = json.loads((tmp_path / "job.ranks" / r["snapshot"]).read_text())
        assert (snap["meta"]["rank"], snap["summary"]["peak_bytes"]) == (r["rank"],
                                                                          r["peak_bytes"])
        assert r["headroom_bytes"] == snap["meta"]["device"]["total_memory_bytes"] - \
            r["peak_bytes"]
    # The worst rank's snapshot is also the job's snapshot, where one-snapshot readers look.
    assert json.loads((tmp_path / "job.json").read_text())["meta"]["rank"] == 0
    table = out.stdout
    assert "Ranks of a 8-process job" in table and "0 ◀" in table and "the worst rank" in table
    assert "0-6" in table and "dp 7/8" in table


def test_evenly_split_fsdp_job_is_one_group(tmp_path):
    out, index = _all(tmp_path, 8, "fsdp2_train.py", "--vocab", "1024")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [(r["rank"], r["alike"]) for r in index["ranks"]] == [(0, list(range(8)))]
    # The last rank, traced beside rank 0, is alike it: its files are not kept.
    assert sorted(p.name for p in (tmp_path / "job.ranks").iterdir()) == [
        "index.json", "rank-0.json", "rank-0.log"]


def test_a_failing_rank_is_reported_with_its_message(tmp_path):
    out, index = _all(tmp_path, 8, "fsdp2_train.py", "--fail-on-rank", "7")
    assert out.returncode == 1
    printed = run_memlens("run", "--device", DEVICE, "--world-size", "8", "--ranks", "all",
                          "--json", "--no-snapshot", "--", str(SCRIPTS / "fsdp2_train.py"),
                          "--fail-on-rank", "0", cwd=tmp_path)
    assert printed.returncode == 1
    error = json.loads(printed.stdout)["error"]  # as a single trace's --json prints it
    assert error["message"].startswith("rank 0: ") and "rank 0 has no data shard" in \
        error["message"]
    rows = {r["rank"]: r for r in index["ranks"]}
    assert rows[0]["status"] == "ok" and rows[7]["status"] == "failed"
    assert "rank 7 has no data shard" in rows[7]["error"]["message"]
    assert rows[7]["error"]["line"] > 0 and rows[7]["error"]["file"].endswith("fsdp2_train.py")
    assert "rank 7 failed:" in out.stdout and "rank 7 has no data shard" in out.stdout


def test_pipeline_job_traces_every_stage(tmp_path):
    # Named as a user in its folder names it: each rank's worker (forked from the warm process,
    # which runs in "/") finds it in the command's directory.
    out, index = _all(tmp_path, 4, "pp_train.py", relative=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [(r["rank"], r["role"]) for r in index["ranks"]] == [
        (s, f"pp {s}/4") for s in range(4)]
    assert index["worst_rank"] == 3  # the last stage also holds the head


# -- the grouping rule on layouts rank 0 could report ---------------------------------------------
def _family(name, groups, uses, shards=()):
    return {"name": name, "groups": groups, "uses": uses, "shards": list(shards)}


def test_grouping_rule():
    mesh_dp = [[0, 2, 4, 6], [1, 3, 5, 7]]  # mesh (dp=4, tp=2): dp groups vary the first dim
    mesh_tp = [[0, 1], [2, 3], [4, 5], [6, 7]]
    fsdp_tp = {"families": [_family("dp", mesh_dp, ["data_parallel"], [128, 512]),
                            _family("tp", mesh_tp, ["tensor_parallel"])]}
    assert [(g.representative, g.ranks) for g in group_ranks(fsdp_tp, 8)] == [
        (0, [0, 2, 4, 6]), (1, [1, 3, 5, 7])]
    uneven = {"families": [_family("world", [list(range(8))], ["data_parallel"], [1003])]}
    assert [g.ranks for g in group_ranks(uneven, 8)] == [list(range(7)), [7]]
    unused = {"families": [_family("dp", [list(range(8))], [])]}
    assert [g.ranks for g in group_ranks(unused, 8)] == [list(range(8))]
    partial = {"families": [_family("groups of 2", [[0, 1]], ["all_to_all"])]}
    assert [g.ranks for g in group_ranks(partial, 4)] == [[0], [1], [2, 3]]
    assert [chunk_length(10, 4, i) for i in range(4)] == [3, 3, 3, 1]
    assert [chunk_length(2, 4, i) for i in range(4)] == [1, 1, 0, 0]
    assert compact([0, 1, 2, 3, 5, 7, 8]) == "0-3,5,7-8"


def test_fsdp_over_tensor_parallel_groups_ranks_by_tp_coordinate(tmp_path):
    """Mesh dp x tp = 4 x 2: FSDP over dp (even chunks), TP over tp. Ranks with the same TP
    coordinate are alike, whatever their dp coordinate: two roles, traced by rank 0 and by
    the last rank (traced beside rank 0: parallel_runs.py)."""
    out, index = _all(tmp_path, 8, "fsdp_tp_train.py", "--tp", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [(r["rank"], r["alike"], r["role"]) for r in index["ranks"]] == [
        (0, [0, 2, 4, 6], "dp 0/4 · tp 0/2"), (7, [1, 3, 5, 7], "dp 3/4 · tp 1/2")]
    snap = json.loads((tmp_path / "job.ranks" / "rank-7.json").read_text())
    # Per block: LayerNorm (512) and down's bias (256) replicated over tp; up (1024 x 256 + 1024)
    # and down's weight (256 x 1024) split over tp; then everything split over 4 dp ranks.
    per_tp_rank = 512 + (1024 * 256 + 1024) // 2 + 256 * 1024 // 2 + 256
    assert model_state_bytes(snap)["parameter"] == 2 * 4 * per_tp_rank // 4
    assert snap["meta"]["device_key"] == ("cpu" if DEVICE == "cpu" else "cuda:7")


def test_a_rank_whose_script_leaves_a_detached_child_answers_with_its_error(tmp_path):
    """The rank's script starts a child in a session of its own (it holds the worker's pipes)
    and raises: the rank's error comes back when the worker exits, and the child ends too."""
    from memlens.distributed.workers import run_worker

    pid_file = tmp_path / "child.pid"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""\
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                                 start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        raise RuntimeError("rank 1 has no data")
    """))
    phases, results = [], []
    argv = ["run", "--device", "cpu", "--world-size", "2", "--rank", "1", "--json", "--progress",
            "json", "--no-snapshot", "--", str(script)]
    thread = threading.Thread(target=lambda: results.append(
        run_worker(argv, 1, lambda rank, phase: phases.append((rank, phase)))), daemon=True)
    thread.start()
    thread.join(150)  # the child sleeps 300 s: only waiting on the pipes would take that long
    assert results, "the rank's worker did not answer"
    res = results[0]
    assert res.returncode == 1 and res.duration_s < 100 and (1, "starting") in phases
    assert (res.error["file"], res.error["line"]) == (str(script), 5)
    assert "rank 1 has no data" in res.error["message"]
    child, deadline = int(pid_file.read_text()), time.monotonic() + 10
    while pid_alive(child) and time.monotonic() < deadline:  # SIGKILL lands asynchronously
        time.sleep(0.05)
    assert not pid_alive(child)


def test_each_ranks_worker_traces_as_the_command_asks():
    """A rank's worker gets the command's own choices: `--no-layer-replay` too."""
    from pathlib import Path

    from memlens.cli.all_ranks import worker_argv
    from memlens.cli.parser import build_parser
    from memlens.distributed.env import RankSpec

    args = build_parser().parse_args(["run", "--device", "h100-80gb", "--world-size", "8",
                                      "--ranks", "all", "--no-layer-replay", "--", "train.py"])
    assert worker_argv(args, RankSpec(8, 0), 3, Path("rank-3.json")) == [
        "run", "--json", "--progress", "json", "--device", "h100-80gb", "--world-size", "8",
        "--nproc-per-node", "8", "--rank", "3", "--snapshot", "rank-3.json",
        "--no-layer-replay", "--", "train.py"]
