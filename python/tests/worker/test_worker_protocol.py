"""The lines a memlens worker writes and what its parents read from them (worker/protocol.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from memlens.worker.command import WorkerCommand
from memlens.worker.protocol import (final_json, progress_record,
                                     snapshot_folder_name, worker_env)


def test_progress_records_are_told_from_the_scripts_own_output():
    line = json.dumps({"event": "progress", "phase": "forward", "iteration": 1})
    assert progress_record(line) == {"event": "progress", "phase": "forward", "iteration": 1}
    assert progress_record('{"event": "other"}') is None
    assert progress_record('{"loss": 2.5}') is None  # a script printing JSON
    assert progress_record("{not json") is None
    assert progress_record("epoch 1 loss 2.5") is None


def test_the_result_is_the_last_json_object_on_stdout():
    stdout = 'step 1\n{"peak_bytes": 1024}\n[1, 2]\n{"peak_bytes": 2048}\ntrailing words\n'
    assert final_json(stdout) == {"peak_bytes": 2048}
    assert final_json('{"error": {"kind": "ScriptError"}}') == {"error": {"kind": "ScriptError"}}
    assert final_json("no json at all\n") is None


def test_the_worker_imports_this_memlens_first():
    env = worker_env({"PYTHONPATH": "/extra", "MEMLENS_SERVER": "1"}, {"TARGET_VAR": "x"})
    this = str(Path(__file__).resolve().parents[2])  # python/, the parent of memlens/
    assert env["PYTHONPATH"].split(os.pathsep) == [this, "/extra"]
    assert env["TARGET_VAR"] == "x" and "MEMLENS_SERVER" not in env
    assert env["PYTHONIOENCODING"] == "utf-8"


def test_a_targets_snapshot_folder_is_named_by_what_it_is_not_how_it_was_reached(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "link.py").symlink_to(tmp_path / "train.py")
    name = snapshot_folder_name("script", "train.py", str(tmp_path / "train.py"))
    assert name.startswith("script-train.py-") and len(name) == len("script-train.py-") + 8
    assert snapshot_folder_name("script", "train.py", str(tmp_path / "link.py")) == name
    assert snapshot_folder_name("model", "GPT", str(tmp_path / "train.py"), "GPT") != \
        snapshot_folder_name("model", "GPT", str(tmp_path / "train.py"), "GPT2")
    assert snapshot_folder_name("launch", "a b/c", "/ws/launch.json", "a b/c").startswith(
        "launch-a_b_c-")


def test_one_command_line_for_every_worker():
    rank = WorkerCommand(["--", "t.py", "-v"], world_size=8, nproc_per_node=4, rank=5,
                         device="h100-80gb", iterations=None, snapshot="/out/rank-5.json")
    assert rank.args() == ["run", "--json", "--progress", "json", "--device", "h100-80gb",
                           "--world-size", "8", "--nproc-per-node", "4", "--rank", "5",
                           "--snapshot", "/out/rank-5.json", "--", "t.py", "-v"]
    assert WorkerCommand(["--launch", "train"], snapshot=False).args()[-3:] == \
        ["--no-snapshot", "--launch", "train"]
    model = WorkerCommand(["/ws/m.py:GPT"], "trace", with_digest=True, debug=True,
                          options=(("--sdpa-backend", None), ("--max-allocations", 10)))
    assert model.argv("/py") == ["/py", "-m", "memlens", "--debug", "trace", "/ws/m.py:GPT",
                                 "--json", "--progress", "json", "--with-digest",
                                 "--max-allocations", "10"]
    search = WorkerCommand(["--", "t.py"], "fit", jobs=2, all_ranks=False,
                           extra=["--gpus=1,2"])
    assert search.args() == ["fit", "--json", "--progress", "json", "--jobs", "2", "--gpus=1,2",
                             "--", "t.py"]
