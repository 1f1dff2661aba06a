"""The language server's pure parts: annotations from a digest, line mapping, the Python
outline, target discovery, settings, and the protocol declaration."""

from __future__ import annotations

import json
import keyword
import os
import subprocess
import sys
import time

import pytest

from memlens.server import protocol as P
from memlens.server.annotations import age_text, annotate, hint_text, hover_markdown
from memlens.server.documents import DocState
from memlens.server.edits import line_map
from memlens.server.index import SnapshotEntry
from memlens.server.outline import outline
from memlens.server.settings import Settings, parse_settings
from memlens.server.targets import document_targets, scan_workspace
from memlens.server.traced import TracedTexts

from support.paths import REPO
from support.digests import F, MiB, NET, digest, entry, module


def by_line(anns):
    return {a.line + 1: a for a in anns}


def test_module_annotations_per_instance_with_the_count():
    anns = by_line(annotate(NET, F, lambda n: 11 <= n <= 20, top_lines=2))
    assert anns[10].text == "≈ 72.0 MiB · 40.0 MiB act"  # total first, then activations
    assert anns[30].text == "≈ 18.0 MiB · 10.0 MiB act ×4"
    assert anns[30].kind == "class" and anns[30].label == "layers.*"
    # The colour's share is of the text's total (4 x 18 MiB of a 100 MiB peak); the bytes
    # alive at the peak stay the annotation's bytes.
    assert anns[30].bytes == 48 * MiB and anns[30].share == pytest.approx(0.72)
    # The ModuleList line reads as its blocks; a mixed Sequential stays one module; a module
    # with no bytes (Dropout) gets no annotation.
    assert anns[14].text == anns[30].text and anns[14].kind == "construct"
    assert anns[15].label == "head" and "act" not in anns[15].text  # no zero segment
    assert 16 not in anns


def test_hot_lines_skip_init_and_keep_the_top_n():
    anns = by_line(annotate(NET, F, lambda n: 11 <= n <= 20, top_lines=2))
    assert anns[40].text == "≈ 30.0 MiB at peak (30.0%) · act"  # the rest in the hover
    assert anns[41].text == "≈ 5.0 MiB at peak (5.0%) · act"
    assert 12 not in anns and 42 not in anns  # in __init__; beyond the top 2
    assert 1 not in anns  # another file's line
    more = by_line(annotate(NET, F, lambda n: False, top_lines=10))
    assert 12 in more and more[42].text.startswith("≈ 1.0 KiB at peak (<0.1%)")


def test_hover_tables_and_footer():
    a = by_line(annotate(NET, F))[30]
    md = hover_markdown(a, NET, 80 * 1024**3, now=None)
    assert "**class `Block`** · 4 instances: `layers.0`, `layers.1`, `layers.2`, `layers.3`" in md
    assert "| parameters | 2.0 MiB | 8.0 MiB | 8.0 MiB | 8.0% |" in md
    assert "| optimizer state | 4.0 MiB | 16.0 MiB | 0 B | 0% |" in md
    assert "| activations | 10.0 MiB | 40.0 MiB | 40.0 MiB | 40.0% |" in md
    assert "| **total** | | | **48.0 MiB** | **48.0%** |" in md
    assert "| buffers |" not in md  # shown only when not zero
    assert ("Peak **100.0 MiB** of 80.0 GiB in `forward_backward_iter_1` · rank 3 of 8 · "
            "h100-80gb (NVIDIA H100 80GB HBM3) · model `Net`") in md
    small_budget = hover_markdown(a, NET, 70 * 1024**3)
    assert "of 80.0 GiB (budget 70.0 GiB)" in small_budget
    assert "*Stale*" in hover_markdown(a, NET, 1, stale=True)
    assert hint_text(a, True) == a.text + " (stale)"
    line = by_line(annotate(NET, F))[40]
    md = hover_markdown(line, NET, 80 * 1024**3)
    assert md.startswith("**Line 40** · 30.0 MiB alive at the peak (30.0% of the peak) · "
                         "60.0 MiB allocated over the trace in 8 allocations")
    assert "| temporaries | 10.0 MiB | 10.0% |" in md


def test_hover_footer_shows_a_subcategory_under_its_total():
    """FP8 training: the FP8 weights and scales of the parameters, at the peak and at most."""
    fp8 = {**NET, "summary": {**NET["summary"], "subcategories": [
        {"label": "fp8 weights/scales", "atPeakBytes": 16 * MiB + 512,
         "peakBytes": 48 * MiB + 4096}]}}
    md = hover_markdown(by_line(annotate(fp8, F))[30], fp8, 80 * 1024**3)
    assert "Of which fp8 weights/scales: 16.0 MiB at the peak, at most 48.0 MiB" in md
    assert "Of which" not in hover_markdown(by_line(annotate(NET, F))[30], NET, 80 * 1024**3)


def test_age_text():
    import datetime as dt
    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    assert age_text("2026-01-01T11:59:30+00:00", now) == "just now"
    assert age_text("2026-01-01T11:55:00+00:00", now) == "5 min ago"
    assert age_text("2026-01-01T09:00:00+00:00", now) == "3 h ago"
    assert age_text("2025-12-30T12:00:00+00:00", now) == "2 days ago"
    assert age_text("yesterday", now) == "at an unknown time"


def test_line_map_follows_inserts_deletes_and_edits():
    old = ["a", "b", "c", "d", "e"]
    assert line_map(old, ["x", "y", *old]) == {i: i + 2 for i in range(5)}
    assert line_map(old, ["a", "c", "d", "e"]) == {0: 0, 2: 1, 3: 2, 4: 3}
    edited = line_map(old, ["a", "B!", "c", "d", "e"])  # a line changed in place keeps its place
    assert edited == {i: i for i in range(5)}
    assert line_map(old, []) == {}
    moved = line_map(old, ["a", "d", "b", "c", "e"])
    assert moved[0] == 0 and moved[4] == 4 and moved[1] == 2 and moved[2] == 3


def test_line_map_follows_the_content_of_a_line_split_by_enter():
    old = ["def f(x):", "    y = 1; return g(x)", "", "z"]
    split = ["def f(x):", "    y = 1;", "    return g(x)", "", "z"]  # Enter after "y = 1;"
    assert line_map(old, split) == {0: 0, 1: 2, 2: 3, 3: 4}  # the half most like the line
    # Typed at the start, then Enter: the typing is most of the line, but the code it had
    # when traced (the anchor) is on the second half.
    typed = ["a", "long_typed_prefix = 1; C", "b"]
    enter = ["a", "long_typed_prefix = 1;", "C", "b"]
    assert line_map(typed, enter)[1] == 1
    assert line_map(typed, enter, {1: "C"})[1] == 2
    assert line_map(typed, ["a", "long_typed_prefix = 1;", "    C  ", "b"], {1: "  C"})[1] == 2
    assert line_map(typed, ["a", "x", "y = C + 1", "b"], {1: "C"})[1] == 2  # contains it
    # Several lines edited in place still pair in order.
    assert line_map(["a", "b1", "c1", "d"], ["a", "b2", "c2", "d"]) == {0: 0, 1: 1, 2: 2, 3: 3}


def test_line_map_is_fast_on_a_keystroke_in_a_big_file():
    old = [f"line {i} = compute({i})" for i in range(20_000)]
    new = old[:10_000] + ["line 10000 = compute(10000)  # edited"] + old[10_001:]
    start = time.perf_counter()
    mapping = line_map(old, new)
    assert time.perf_counter() - start < 0.5
    assert mapping[19_999] == 19_999 and mapping[10_000] == 10_000


def test_a_document_places_annotations_by_the_traced_text():
    traced = "\n".join(f"line {i}" for i in range(1, 51))
    at = [10, 12, 14, 15, 30, 40, 41, 42]  # NET's annotated lines (no __init__ in this text)
    edited = "# new\n# lines\n" + traced  # saved after the trace
    doc = DocState("file:///src/model.py", F, edited)
    doc.attach(entry(), traced, top_lines=5)
    assert doc.stale and sorted(p.line + 1 for p in doc.placed) == [n + 2 for n in at]
    doc.update_text(traced)  # back to the traced text: exact and fresh
    assert not doc.stale and sorted(p.line + 1 for p in doc.placed) == at
    doc.update_text(edited)
    doc.attach(entry(), None, top_lines=5)  # the traced text unknown: the snapshot's lines
    assert doc.stale and sorted(p.line + 1 for p in doc.placed) == at
    crlf = DocState("file:///src/model.py", F, edited)  # an editor holding a CRLF file as LF
    crlf.attach(entry(), traced.replace("\n", "\r\n"), top_lines=5)
    assert sorted(p.line + 1 for p in crlf.placed)[0] == 12


def test_traced_texts_keep_what_a_trace_read(tmp_path):
    src = tmp_path / "model.py"
    src.write_text("old\n")
    os.utime(src, (1000.0, 1000.0))
    texts = TracedTexts()
    texts.capture(str(tmp_path / "a.json"), [str(src), str(tmp_path / "missing.py")])
    src.write_text("new\n")
    ours = SnapshotEntry(str(tmp_path), str(tmp_path), str(tmp_path / "a.json"), 0.0)
    assert texts.text_of(ours, str(src)) == "old\n"  # as the worker saw it
    # Another snapshot (the CLI's): the file on disk if not written since the snapshot.
    cli = SnapshotEntry(str(tmp_path), str(tmp_path), str(tmp_path / "b.json"), time.time())
    assert texts.text_of(cli, str(src)) == "new\n"
    os.utime(src, (time.time() + 60, time.time() + 60))
    assert texts.text_of(cli, str(src)) is None  # written since: unknown
    texts.retain({str(tmp_path / "b.json")})
    assert texts.text_of(ours, str(src)) is None


SCRIPT = """
import torch
from torch.cuda.amp import GradScaler

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x)

def make():
    return Net()

model = make()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for step in range(3):
    loss = model(torch.randn(4, 2)).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
"""


def test_outline_finds_classes_init_bodies_and_training_calls():
    o = outline(SCRIPT)
    assert [(c.name, c.line, c.end_line) for c in o.classes] == [("Net", 5, 11)]
    assert o.init_spans == [(6, 8)]
    assert o.backward_lines == [21] and o.step_lines == [22]  # scaler.step(opt)
    assert o.is_training_script and o.symbol("make").line == 13
    assert not outline("scheduler.step()\nloss.backward()\n").is_training_script
    assert outline("optimizer.step()\nloss.backward()\n").is_training_script
    assert outline("def broken(:\n").ok is False


def test_document_targets_for_a_recipe_class_a_factory_and_a_script(tmp_path):
    (tmp_path / "memlens.toml").write_text(
        '[[model]]\ntarget = "net.py:Net"\nbudget = "40GiB"\n'
        '[[model]]\ntarget = "net.py:make"\n[[model]]\ntarget = "other.py:Net"\n')
    (tmp_path / "net.py").write_text(SCRIPT)
    path = str((tmp_path / "net.py").resolve())
    ts = {t.id: t for t in document_targets(path, SCRIPT, [str(tmp_path.resolve())])}
    assert set(ts) == {"model:net.py:Net", "model:net.py:make", "script:net.py"}
    net = ts["model:net.py:Net"]
    assert (net.line, net.start, net.end, net.symbol) == (4, 6, 9, "Net")
    assert ts["model:net.py:make"].line == 12
    assert ts["script:net.py"].cwd == str(tmp_path.resolve())
    assert net.slug.startswith("model-Net-") and len(net.slug) == len("model-Net-") + 8


def test_scan_skips_environments_and_reports_bad_files(tmp_path):
    (tmp_path / "train.py").write_text("loss.backward()\noptimizer.step()\n")
    for skipped in (".venv/lib", "node_modules/x", "site-packages/y"):
        (tmp_path / skipped).mkdir(parents=True)
        (tmp_path / skipped / "train.py").write_text("loss.backward()\noptimizer.step()\n")
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "launch.json").write_text('{"configurations": [')
    (tmp_path / "run.sh").write_text("torchrun --nproc_per_node 8 train.py\n")
    warnings: list[str] = []
    found = scan_workspace([str(tmp_path.resolve())], warnings.append)
    by_id = {t.id: t for t in found}
    assert sorted(by_id) == ["script:train.py", "torchrun:run.sh:1"]
    assert by_id["torchrun:run.sh:1"].world_size == 8
    assert by_id["torchrun:run.sh:1"].program == str(tmp_path.resolve() / "train.py")
    assert len(warnings) == 1 and "launch.json" in warnings[0] and "invalid JSON" in warnings[0]


def test_settings_are_read_leniently():
    warnings: list[str] = []
    s = parse_settings({"device": "A100-80GB", "budget": "70GiB", "traceTimeout": 30,
                        "memoryLimitMB": 2048, "traceOnSave": "true", "hotLines": -3,
                        "colour": "red", "iterations": "two"}, warnings.append)
    assert (s.device, s.budget, s.traceTimeout, s.traceOnSave, s.hotLines) == (
        "a100-80gb", 70 * 1024**3, 30.0, True, 0)
    assert s.iterations is None and s.memory_limit_bytes() == 2048 * MiB
    assert warnings == ["setting memlens.iterations: expected a positive number, got 'two'; "
                        "using the default"]
    bad: list[str] = []
    s = parse_settings({"budget": "lots", "traceTimeout": 0}, bad.append)
    assert s.budget is None and s.traceTimeout == 300.0 and len(bad) == 2
    assert Settings().memory_limit_bytes() >= 16 * 1024**3
    assert parse_settings({"memoryLimitMB": -1}).memory_limit_bytes() is None


def test_protocol_is_declared_once_and_dumps_as_json():
    described = json.loads(subprocess.run(
        [sys.executable, "-m", "memlens.server.protocol"], capture_output=True, text=True,
        check=True, env={"PYTHONPATH": str(REPO / "python")}).stdout)
    methods = described["methods"]
    assert set(methods) == {
        "memlens.trace", "memlens.cancelTrace", "memlens.openReport", "memlens/targets",
        "memlens/documentAnnotations", "memlens/snapshots", "memlens/serverInfo",
        "memlens/annotations", "memlens/traceStarted", "memlens/traceFinished",
        "memlens/snapshotsChanged", "memlens.fit", "memlens/fitSpace",
        "memlens/documentTraces", "memlens.chooseTrace"}
    types = described["types"]
    for m in methods.values():
        assert m["params"] in types and m.get("result", "EmptyParams") in types
    for name, fields in types.items():
        if isinstance(fields, dict):
            for key, spec in fields.items():
                assert not keyword.iskeyword(key), f"{name}.{key}"
                assert spec["type"], f"{name}.{key}"
    assert types["Target"]["kind"] == {"type": "TargetKind", "optional": False}
    assert types["Target"]["snapshot"] == {"type": "SnapshotInfo", "optional": True}
    assert types["Annotation"]["share"]["type"] == "number"
    assert types["AnnotationsParams"]["snapshot"]["type"] == "SnapshotInfo | null"
    assert types["TargetsResult"]["targets"]["type"] == "Target[]"
    # Every method name is a module constant, spelled once.
    consts = {v for k, v in vars(P).items() if k.startswith(("CMD_", "REQ_", "NOTIFY_"))}
    assert consts == set(methods)


def test_strings_from_a_snapshot_cannot_break_out_of_the_hover():
    hostile = digest([module("", "Net`](http://evil.example/x.png) | <img src=x>", "",
                             source_line=10, parameter=MiB)])
    hostile["meta"]["deviceDisplayName"] = "**GPU** [click](command:rm) | x"
    hostile["summary"]["peakPhase"] = "phase\n\n# heading"
    md = hover_markdown(annotate(hostile, F)[0], hostile, 1)
    head = md.split("\n")[0]
    assert head.startswith("**class `Net'](http://evil.example/x.png) ¦ <img src=x>`**")
    assert "\\*\\*GPU\\*\\* \\[click\\]\\(command:rm\\) \\| x" in md
    assert "`phase # heading`" in md and "\n# heading" not in md


def test_a_fit_request_becomes_the_clis_command_line():
    from memlens.errors import MemlensError
    from memlens.server.fitting import FitRequest, fit_command, progress_message, space_options
    from memlens.server.targets import TargetInfo

    space = space_options(["--micro-batch", "1,2", "--axis", "micro-batch=--batch-size",
                           "--arg=--lr=1e-4,3e-4"])
    assert space == ["--micro-batch=1,2", "--axis=micro-batch=--batch-size",
                     "--arg=--lr=1e-4,3e-4"]
    with pytest.raises(MemlensError, match="'--ray' is not an option of the space"):
        space_options(["--ray", "auto"])
    with pytest.raises(MemlensError, match="--tp needs a value"):
        space_options(["--tp"])
    launch = TargetInfo("launch:l:Train", "launch", "Train", "/ws/.vscode/launch.json", 3,
                        folder="/ws", program="/ws/train.py", args=["--steps", "2"],
                        env={"SEQ": "8"}, world_size=4)
    argv, cwd, env = fit_command(FitRequest(launch, "h100-80gb", 2, space, "micro-batch"), "py")
    # a launch configuration of 4 processes keeps its world size unless the space varies it
    assert argv == ["py", "-m", "memlens", "fit", "--json", "--progress", "json", "--device",
                    "h100-80gb", "--jobs", "1", "--iterations", "2", "--sort", "micro-batch",
                    *space, "--gpus=4", "--", "/ws/train.py", "--steps", "2"]
    assert cwd == "/ws" and env["SEQ"] == "8"
    argv, _, _ = fit_command(FitRequest(launch, "h100-80gb", None, ["--gpus=8,16"]), "py")
    assert "--gpus=4" not in argv and "--gpus=8,16" in argv
    torchrun = TargetInfo("torchrun:t.sh:5", "torchrun", "t.sh", "/ws/t.sh", 4, folder="/ws")
    assert fit_command(FitRequest(torchrun, "b200", None, []), "py")[0][-2:] == [
        "--from-script", "/ws/t.sh:5"]
    model = TargetInfo("model:m.py:GPT", "model", "GPT", "/ws/m.py", 0, symbol="GPT")
    with pytest.raises(MemlensError, match="GPT is a model class"):
        fit_command(FitRequest(model, "b200", None, []), "py")
    # progress: the share settled; bytes formatted only here, at the edge
    assert progress_message({"settled": 0, "points": 8}) == ("0/8 settled", 0)
    assert progress_message({"settled": 3, "points": 8, "point": "micro-batch=4",
                             "verdict": "fits", "peak_bytes": 20 * 1024**3 + 100 * MiB,
                             "headroom_bytes": 50 * 1024**3}) == (
        "3/8 settled · micro-batch=4: fits, peak 20.1 GiB, headroom 50.0 GiB", 37)


def test_the_fit_payload_is_the_clis_document_in_camel_case():
    from memlens.server.payloads import fit_report

    axes = [{"name": "gpus", "values": ["2"], "target": "world size", "direction": "down"},
            {"name": "micro-batch", "values": ["2", "4"], "target": "--batch-size",
             "direction": "up"}]
    traced = {"key": "gpus=2,micro-batch=4", "point": {"gpus": "2", "micro-batch": "4"},
              "gpus": 2, "folder": "gpus=2_micro-batch=4-abcd", "verdict": "fits",
              "source": "traced", "by": None, "worst_rank": 1, "ranks_traced": 2,
              "peak_bytes": 3 * MiB, "reserved_peak_bytes": 4 * MiB,
              "outside_allocator_bytes": MiB, "headroom_bytes": 10 * MiB - 5 * MiB,
              "snapshot": "snapshot.json", "reason": "fits with 5.0 MiB headroom"}
    implied = {"key": "gpus=2,micro-batch=2", "point": {"gpus": "2", "micro-batch": "2"},
               "gpus": 2, "folder": "gpus=2_micro-batch=2-ef01", "verdict": "fits",
               "source": "implied", "by": "gpus=2,micro-batch=4",
               "reason": "fits: needs at most as much as gpus=2,micro-batch=4 (not traced)"}
    doc = {"target": "train", "device": "h100-80gb", "device_total_bytes": 10 * MiB,
           "space": axes, "sort": "peak", "run_dir": "/ws/.memlens/fit/train-1",
           "html": "/ws/.memlens/fit/train-1/fit.html", "interrupted": False,
           "counts": {"points": 2, "traced": 1, "resumed": 0, "pruned": 0, "implied": 1,
                      "not traced": 0, "fits": 2, "oom": 0, "errors": 0},
           "frontier": [traced, implied], "excluded": [], "rows": [implied, traced]}
    out = fit_report(doc)
    assert [r["values"] for r in out["frontier"]] == [["2", "4"], ["2", "2"]]  # the CLI's order
    assert out["frontier"][0] == {
        "key": "gpus=2,micro-batch=4", "values": ["2", "4"], "gpus": 2, "verdict": "fits",
        "source": "traced", "reason": "fits with 5.0 MiB headroom", "by": None,
        "worstRank": 1, "peakBytes": 3 * MiB, "reservedPeakBytes": 4 * MiB,
        "headroomBytes": 5 * MiB, "ranksTraced": 2,
        "snapshot": "/ws/.memlens/fit/train-1/points/gpus=2_micro-batch=4-abcd/snapshot.json"}
    assert out["frontier"][1]["peakBytes"] is None and out["frontier"][1]["snapshot"] is None
    assert out["counts"]["notTraced"] == 0 and out["deviceTotalBytes"] == 10 * MiB
