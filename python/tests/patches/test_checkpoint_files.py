"""A traced script's checkpoints stay inside the trace (patches/checkpoint_files.py): the file
already at the path it saves to is left as it was, no checkpoint folder appears, and the script
still reads back what it saved, with a note naming each path."""

from __future__ import annotations

import json

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in a fresh process

SCRIPT = TESTS / "scripts" / "checkpoints" / "save_and_resume.py"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints")
    (folder / "ckpt.pt").write_bytes(b"the user's real checkpoint")
    out = run_memlens("run", "--json", "--snapshot", str(folder / "snap.json"), "--",
                      str(SCRIPT), cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    return folder, json.loads((folder / "snap.json").read_text())


def test_no_file_of_the_users_is_written(traced):
    folder, _ = traced
    assert (folder / "ckpt.pt").read_bytes() == b"the user's real checkpoint"
    assert not (folder / "dcp_ckpt").exists()


def test_the_script_reads_back_what_it_saved(traced):
    folder, _ = traced
    report = json.loads((folder / "report.json").read_text())
    # Linear(256, 256): the state dict saved and loaded back; AdamW's state of both tensors
    assert report == {"step": 1, "shapes": {"weight": [256, 256], "bias": [256]},
                      "optimizer_states": 2,
                      "sharded": {"weight": [256, 256], "bias": [256]}}


def test_each_checkpoint_is_named_in_a_note(traced):
    _, snap = traced
    notes = snap["meta"]["notes"]
    assert any(n.startswith("torch.save to ckpt.pt: kept in the trace's memory") for n in notes)
    assert any(n.startswith("torch.distributed.checkpoint to dcp_ckpt: written into a folder")
               for n in notes)
