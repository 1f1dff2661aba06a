"""What self-contained training scripts do and a report must still get right: torch.compile,
model classes defined in the script itself, and reports written to a log."""

import json
import os
import subprocess
import sys

import pytest

from support.paths import REPO, TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts"
GPT = SCRIPTS / "compiled_gpt.py"
# 42,880 fp32 parameters: wte 8,192, wpe 1,024, 2 blocks of 12,704 (two LayerNorms 128,
# c_attn 3,168, c_proj 1,056, fc 4,224, proj 4,128), ln_f 64, lm_head 8,192.
GPT_PARAMETERS = 8_192 + 1_024 + 2 * (2 * 64 + 3_168 + 1_056 + 4_224 + 4_128) + 64 + 8_192


def line_of(path, text: str) -> int:
    """The first line that begins (indentation aside) with `text`."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if ln.strip().startswith(text))


def mode_note(place: str, call: str) -> str:
    return (f"{place}: {call}: compiled with Inductor's default kernel choices (its mode and "
            "options choose kernels by benchmarking them, which a trace cannot)")


@pytest.mark.parametrize("how, call, line", [
    ("plain", "torch.compile(GPT)", "model = torch.compile(model)"),
    ("fullgraph", "torch.compile(GPT, fullgraph=True)", "model = torch.compile(model, full"),
    ("mode", "torch.compile(GPT, mode='max-autotune', dynamic=True)",
     "model = torch.compile(model, mode"),
    ("method", "GPT.compile()", "model.compile()"),
])
def test_compiled_regions_are_compiled_and_reported_by_call(memlens, how, call, line):
    out = memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--", str(GPT),
                  "--how", how)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["iterations_traced"] == 2
    place = f"{GPT}:{line_of(GPT, line)}"
    # The decorated helpers (bare and with arguments) are inlined into the model's graph, as
    # Dynamo inlines them: one region, one graph, nothing traced eagerly.
    assert data["notes"] == ([mode_note(place, call)] if how == "mode" else [])
    region, = data["compiled_regions"]
    assert (region["place"], region["call"], region["compiled_as"]) == (place, call, "inductor")
    assert (region["graphs"], region["graph_breaks"]) == (1, 0)
    # Inductor's partitioner recomputes cheap pointwise values instead of saving them.
    assert 0 < region["saved_bytes"] < region["eager_saved_bytes"]
    # The compiled model keeps the model's own names (no `_orig_mod.` wrapper).
    fqns = {m["fqn"] for m in data["modules"]}
    assert {"", "h.0.attn.c_attn", "lm_head"} <= fqns
    assert not any("_orig_mod" in f for f in fqns)
    assert data["category_peaks"]["parameter"] == GPT_PARAMETERS * 4
    assert data["category_peaks"]["gradient"] == GPT_PARAMETERS * 4


def test_torch_compile_is_restored_after_the_trace():
    code = ("import torch\nfrom memlens import Tracer\noriginal = torch.compile, "
            "torch.nn.Module.compile\nwith Tracer('cpu'):\n    assert torch.compile is not "
            "original[0]\nassert (torch.compile, torch.nn.Module.compile) == original\n"
            "print('restored')")
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "restored" in out.stdout, out.stderr[-2000:]


def test_classes_defined_in_the_script_keep_their_source(memlens, tmp_path):
    script = SCRIPTS / "self_contained_train.py"
    snap = tmp_path / "s.json"
    out = memlens("run", "--device", "cpu", "--snapshot", str(snap), "--", str(script))
    assert out.returncode == 0, out.stderr[-3000:]
    modules = {m["fqn"]: m for m in json.loads(snap.read_text())["modules"]}
    assert modules["transformer_encoder_layers.0"]["class"] == "FeedForwardBlock"
    assert modules["transformer_encoder_layers.0"]["source"] == {
        "file": str(script), "line": line_of(script, "class FeedForwardBlock(")}
    assert modules[""]["source"] == {
        "file": str(script),
        "line": line_of(script, "class TinyTransformerEncoderForSequenceClassification(")}


def test_tables_in_a_log_are_not_cut_at_80_columns(memlens):
    """stderr to a file (`memlens run ... 2>log`): no terminal, no COLUMNS; the longest module
    group (58 characters) is printed whole, in a table wider than 80 columns."""
    env = {"COLUMNS": ""}  # not a width: as if unset
    out = memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--",
                  str(SCRIPTS / "self_contained_train.py"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    name = "transformer_encoder_layers.*.intermediate_dense_projection"
    row = next(ln for ln in out.stderr.splitlines() if name in ln)
    assert "FeedForwardBlock" not in row and "Linear" in row and len(row) > 80
