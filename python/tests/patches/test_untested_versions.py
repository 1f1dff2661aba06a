"""A library outside the versions memlens' integration was tested on is said in the trace's
report and snapshot (meta.notes), on every rank, whatever warning filters the script sets: a
Python warning was the script's to silence, and Megatron-LM's pretrain_gpt.py silences them on
every rank but 0."""

import json
import os
import warnings

import pytest

from memlens.patches.patcher import TESTED_VERSIONS, check_tested, versions_noted
from support.paths import TESTS
from support.runs import run_memlens

SCRIPTS = TESTS / "scripts" / "versions"


def test_inside_a_trace_an_untested_version_is_a_note_not_a_warning():
    library, low, high = TESTED_VERSIONS["torch_core"]
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would raise here
        with versions_noted(notes.append):
            check_tested("torch_core", low)  # the lowest tested version: nothing said
            check_tested("torch_core", high)  # the first untested one
    assert notes == [f"{library} {high} is outside the range memlens' integration was tested "
                     f"on [{low}, {high}): estimates may be affected"]
    with pytest.warns(UserWarning, match=f"{library} {high} is outside the tested range"):
        check_tested("torch_core", high)  # no trace listening: a warning, as before


@pytest.mark.slow  # a trace in a fresh process
def test_rank_7_of_a_script_that_silences_warnings_notes_the_version(tmp_path):
    """safetensors 0.1.0 (a stand-in first on the path), below the tested [0.4.0, 0.9.0), in a
    script that ignores every warning on ranks other than 0, traced as rank 7 of 8: the note is
    in the snapshot's meta.notes and printed under the report."""
    library, low, high = TESTED_VERSIONS["hf_safetensors"]
    note = (f"{library} 0.1.0 is outside the range memlens' integration was tested on "
            f"[{low}, {high}): estimates may be affected")
    snapshot = tmp_path / "rank7.json"
    path = os.pathsep.join([str(SCRIPTS / "old_safetensors"), os.environ.get("PYTHONPATH", "")])
    out = run_memlens("run", "--snapshot", str(snapshot), "--world-size", "8", "--rank", "7",
                      "--", str(SCRIPTS / "quiet_rank.py"),
                      env={"PYTHONPATH": path, "COLUMNS": "300"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(snapshot.read_text())["meta"]["notes"] == [note]
    assert f"note: {note}" in out.stdout
