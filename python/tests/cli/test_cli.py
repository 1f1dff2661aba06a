"""The CLI as a user meets it: reports, JSON, snapshots, and clear errors for bad input."""

import json

import pytest

from memlens.worker.protocol import snapshot_folder_name
from support.paths import TESTS
from support.trace_cache import traced

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts"


def test_run_prints_the_report_and_writes_a_snapshot(memlens, tmp_path):
    out = memlens("run", "--device", "cpu", "--", str(SCRIPTS / "patterns.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for heading in ("Phases", "At the peak", "Top modules", "Top source lines"):
        assert heading in out.stdout
    # The folder the language server keeps the same script's snapshots in (worker/protocol.py).
    folder = snapshot_folder_name("script", "patterns.py", str(SCRIPTS / "patterns.py"))
    snaps = list((tmp_path / ".memlens" / folder).glob("*.json"))
    assert len(snaps) == 1
    shown = memlens("show", str(snaps[0]), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["peak_bytes"] == json.loads(snaps[0].read_text())["summary"][
        "peak_bytes"]


def _patterns_json():
    """patterns.py traced on the CPU with --json, once per session (support/trace_cache.py)."""
    return traced("run", "--device", "cpu", "--json", "--", str(SCRIPTS / "patterns.py"))


def test_json_puts_one_object_on_stdout():
    run = _patterns_json()
    out, snap = run.out, run.snapshot_path
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)  # nothing else on stdout: not even the script's prints
    for key in ("peak_bytes", "peak_phase", "device", "categories_at_peak", "category_peaks",
                "phases", "modules", "snapshot"):
        assert key in data
    assert data["snapshot"] == str(snap)
    assert set(data["categories_at_peak"]) == {"parameter", "buffer", "gradient",
                                               "optimizer_state", "activation", "temporary",
                                               "input", "other"}
    assert sum(data["categories_at_peak"].values()) == data["peak_bytes"]
    assert data["phases"][0] == {**data["phases"][0], "name": "setup_model_and_optimizer",
                                 "device": "cpu"}
    assert "Phases" in out.stderr  # the tables went to stderr


def test_unmodified_script_patterns_work():
    """.to(dtype) after building, deepcopy (nn.TransformerEncoder, an EMA copy), init that reads
    values: the trace runs and answers the value reads with neutral placeholders."""
    out = _patterns_json().out
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    lines = {(p["line"], p["value"]) for p in data["placeholders"]}
    assert (17, 0.0) in lines  # scale = ...max().item()
    assert data["phases"][-1]["name"] == "optimizer_step_iter_1"  # stopped after 2 iterations
    params = next(m for m in data["modules"] if m["fqn"] == "")["parameter_bytes"]
    # bf16 after .to(): fc (32x32 + 32) and two encoder layers (attention 4*32*32+4*32, two
    # linears 32x64+64 and 64x32+32, two LayerNorms 2*(32+32)), 2 bytes each.
    layer = (3 * 32 * 32 + 3 * 32) + (32 * 32 + 32) + (32 * 64 + 64) + (64 * 32 + 32) + 2 * 64
    assert params == 2 * ((32 * 32 + 32) + 2 * layer)


def test_a_size_with_no_bound_stops_with_the_users_line_after_the_report(memlens):
    out = memlens("run", "--no-snapshot", "--", str(SCRIPTS / "values" / "unbounded_size.py"),
                  env={"COLUMNS": "40"})
    assert out.returncode == 1
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert "unbounded_size.py:6: `repeat_interleave` needs real tensor values" in errors[0]
    assert "Make the size independent of tensor values" in errors[0]  # the remedy
    assert "Traceback" not in out.stderr
    # What was traced until then is reported first: the 64 MiB of weights (4096 x 4096 fp32)
    # and the 32 KiB of repeats (4096 int64) on the device.
    assert "setup_model_and_optimizer" in out.stdout
    assert "64.0 MiB" in out.stdout


def test_a_script_that_raises_points_at_its_line(memlens):
    out = memlens("run", "--device", "cpu", "--no-snapshot", "--", str(SCRIPTS / "raises.py"),
                  env={"COLUMNS": "40"})
    assert out.returncode == 1
    assert "raises.py:7: " in out.stderr
    # whole on one line even in a narrow terminal: errors are copied and searched for
    assert "ValueError: the learning rate schedule is empty" in out.stderr
    assert "memlens/" not in out.stderr  # no traceback from memlens itself


def test_a_failing_script_in_json_mode_reports_the_error_as_json(memlens):
    out = memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--",
                  str(SCRIPTS / "raises.py"))
    assert out.returncode == 1
    error = json.loads(out.stdout)["error"]
    assert error["line"] == 7 and error["file"].endswith("raises.py")
    assert "broken_step()" in error["traceback"]


def test_missing_script(memlens, tmp_path):
    out = memlens("run", "--", "no_such_train.py", cwd=tmp_path)
    assert out.returncode == 1
    assert "script not found: no_such_train.py" in out.stderr


def test_unknown_device_lists_the_valid_ones(memlens):
    out = memlens("run", "--device", "h900", "--", str(SCRIPTS / "raises.py"))
    assert out.returncode == 1
    assert "unknown device 'h900'; valid devices: h100-80gb, h100-94gb, h100-96gb, h200, gh200-96gb" in out.stderr


def test_trace_a_model_from_its_recipe(memlens):
    out = memlens("trace", f"{SCRIPTS / 'model_factory.py'}:Tiny", "--json", "--no-snapshot")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["device"] == "cpu"  # from memlens.toml
    fc = next(m for m in data["modules"] if m["fqn"] == "fc")
    assert fc["parameter_bytes"] == (16 * 16 + 16) * 4
    assert fc["optimizer_state_bytes"] == 2 * (16 * 16 + 16) * 4 + 2 * 4  # AdamW + step scalars
    assert [p["name"] for p in data["phases"]][-1] == "optimizer_step_iter_1"


def test_factory_that_does_not_return_a_module(memlens):
    out = memlens("trace", f"{SCRIPTS / 'model_factory.py'}:not_a_model", "--no-snapshot")
    assert out.returncode == 1
    assert "not_a_model returned int, not a torch.nn.Module" in out.stderr


def test_recipe_with_a_wrong_shape_points_at_the_forward(memlens):
    out = memlens("trace", f"{SCRIPTS / 'model_factory.py'}:Tiny", "--no-snapshot", "--batch",
                  "4", "--recipe", str(SCRIPTS / "memlens.toml"), env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    bad = SCRIPTS.parent / "scripts" / "memlens.toml"
    wrong = memlens("trace", f"{SCRIPTS / 'model_factory.py'}:Tiny", "--no-snapshot",
                    "--recipe", str(bad), "--precision", "bf17")
    assert wrong.returncode == 1
    assert "unknown precision 'bf17'" in wrong.stderr


def test_missing_class_names_the_modules_that_exist(memlens):
    out = memlens("trace", f"{SCRIPTS / 'model_factory.py'}:Huge", "--no-snapshot")
    assert out.returncode == 1
    assert "has no class or factory named 'Huge'; modules defined there: Tiny" in out.stderr
