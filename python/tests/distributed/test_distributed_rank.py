"""One simulated rank: what torchrun would give it, and process groups that work."""

import json

import pytest

from support.runs import run_memlens
from support.ranks import DEVICE, SCRIPTS, allocations_of

pytestmark = pytest.mark.slow  # traces in fresh processes


def test_the_rank_sees_torchrun_variables_and_working_groups(tmp_path):
    report, snap = tmp_path / "report.json", tmp_path / "snap.json"
    out = run_memlens("run", "--device", DEVICE, "--world-size", "8", "--nproc-per-node", "4",
                      "--rank", "5", "--json", "--snapshot", str(snap), "--",
                      str(SCRIPTS / "env_probe.py"), str(report), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(report.read_text())
    assert {k: r[k] for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                              "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")} == {
        "WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert (r["world"], r["rank"], r["in_evens"]) == (8, 5, -1)
    assert r["mesh"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (r["coordinate"], r["tp_rank"], r["tp_size"], r["dp_group_size"]) == ([1, 1], 1, 4, 2)
    assert r["gathered_shape"] == [4096]
    assert r["objects"] == [{"rank": 5}] * 8  # every rank answers as this one
    s = json.loads(snap.read_text())
    assert (s["meta"]["world_size"], s["meta"]["rank"]) == (8, 5)
    par = s["meta"]["parallel"]
    assert par["meshes"] == [{"shape": [2, 4], "dim_names": ["dp", "tp"], "coordinate": [1, 1]}]
    assert (par["local_rank"], par["local_world_size"]) == (1, 4)
    # The rank's device is its local GPU; the gathered output is an allocation of its own.
    assert s["meta"]["device_key"] == ("cpu" if DEVICE == "cpu" else "cuda:1")
    assert allocations_of(s, 4 * 4096) >= 1


def test_rank_outside_the_job_and_missing_world_size_are_errors(tmp_path):
    out = run_memlens("run", "--world-size", "4", "--rank", "4", "--", "x.py", cwd=tmp_path)
    assert out.returncode == 1 and "--rank 4 is outside the job: ranks are 0 to 3" in out.stderr
    out = run_memlens("run", "--rank", "1", "--", "x.py", cwd=tmp_path)
    assert out.returncode == 1 and "need --world-size" in out.stderr
