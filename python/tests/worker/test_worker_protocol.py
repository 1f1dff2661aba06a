"""The lines a memlens worker writes and what its parents read from them (worker/protocol.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from memlens.worker.protocol import (final_json, progress_record, rank_argv,
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


def test_a_ranks_worker_gets_the_parents_options_that_are_set():
    argv = rank_argv(8, 4, 5, "/out/rank-5.json", (("--device", "h100-80gb"),
                                                   ("--iterations", None)), ["--", "t.py", "-v"])
    assert argv == ["run", "--world-size", "8", "--nproc-per-node", "4", "--rank", "5", "--json",
                    "--progress", "json", "--device", "h100-80gb", "--snapshot",
                    "/out/rank-5.json", "--", "t.py", "-v"]
    assert rank_argv(2, 2, 0, None, (), ["--launch", "train"])[-3:] == \
        ["--no-snapshot", "--launch", "train"]
