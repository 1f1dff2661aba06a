"""`memlens export --memory-viz`: PyTorch's own memory_viz functions read the export, and the
bytes they show are memlens' bytes."""

import io
import json
import pickle
import pickletools

import pytest
from torch.cuda import _memory_viz as viz

from support.paths import TESTS
from memlens import categories as C
from memlens.errors import MemlensError
from memlens.reports.memory_viz import memory_viz_snapshot

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "grow.py"
# What the viewer's JavaScript unpickler reads (MemoryViz.js `unpickle`): nothing else may
# appear in the file.
VIEWER_OPCODES = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET",
                  "LONG_BINGET", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK", "SETITEM",
                  "SETITEMS", "APPEND", "APPENDS", "DICT", "LIST", "TUPLE", "TUPLE1", "TUPLE2",
                  "TUPLE3", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "NONE",
                  "NEWTRUE", "NEWFALSE", "SHORT_BINUNICODE", "BINUNICODE", "STOP"}
CASES = {"fits": (160, {}), "oom": (320, {}),
         "expandable": (160, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})}


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    from support.runs import run_memlens

    from support.trace_cache import grow_trace

    batch, env = CASES[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    out_path = tmp / "s.pickle"
    run = grow_trace(batch, env)  # the traces test_oom.py reads too, once per session
    snap_path = run.snapshot_path
    assert run.out.returncode == 0, run.out.stderr
    export = run_memlens("export", str(snap_path), "--memory-viz", str(out_path))
    assert export.returncode == 0, export.stderr
    raw = out_path.read_bytes()
    return request.param, json.loads(snap_path.read_text()), raw, pickle.loads(raw)


def _cuda_allocations(snap):
    alloc = snap["allocations"]
    cuda = alloc["devices"].index("cuda:0")
    ids = [i for i, d in enumerate(alloc["device"]) if d == cuda]
    return alloc, sorted(ids, key=lambda i: alloc["alloc_seq"][i])


def test_pytorchs_views_read_it(exported):
    _, _, raw, data = exported
    assert "segments: " in viz.segsum(data)  # also checks every segment's accounting
    assert viz.trace(data).startswith("Device 0 ----------------")
    for html in (viz.trace_plot(data), viz.segment_plot(data)):
        assert "MemoryViz.js" in html and "snapshot.pickle" in html
    used = {op.name for op, _, _ in pickletools.genops(io.BytesIO(raw))}
    assert used <= VIEWER_OPCODES, used - VIEWER_OPCODES


def test_reserved_memory_it_shows_is_ours(exported):
    _, snap, _, data = exported
    device = snap["summary"]["devices"]["cuda:0"]
    reserved = peak = 0
    for e in data["device_traces"][0]:  # what the segment timeline draws
        if e["action"] in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        elif e["action"] in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        peak = max(peak, reserved)
    assert peak == device["reserved_peak_bytes"] == snap["summary"]["reserved_peak_bytes"]
    assert reserved == device["reserved_final_bytes"]
    assert sum(s["total_size"] for s in data["segments"]) == device["reserved_final_bytes"]
    assert f"total_reserved: {viz.Bytes(device['reserved_final_bytes'])}\n" in viz.segsum(data)


def test_allocations_it_shows_are_ours(exported):
    case, snap, _, data = exported
    alloc, ids = _cuda_allocations(snap)
    refused = _refused(snap, alloc)  # PyTorch would have raised there
    ids = [i for i in ids if i != refused]
    requested = alloc["requested_bytes"]
    entries = data["device_traces"][0]
    assert [e["size"] for e in entries if e["action"] == "alloc"] == \
        [requested[i] for i in ids if requested[i] > 0]
    live = [i for i in ids if alloc["free_seq"][i] < 0]
    blocks = [b for s in data["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"]
    assert sum(b["requested_size"] for b in blocks) == sum(requested[i] for i in live)
    if case != "oom":  # memlens counts a refused block as if the card were larger
        assert sum(b["size"] for b in blocks) == snap["summary"]["final_bytes"]
    assert f"{len(entries)} entries" in viz.trace(data)


def _refused(snap, alloc):
    oom = snap["summary"]["oom"]
    if oom is None:
        return None
    return next(i for i, s in enumerate(alloc["alloc_seq"]) if s == oom["seq"])


def test_frames_and_categories_are_ours(exported):
    _, snap, _, data = exported
    entries = data["device_traces"][0]
    first = next(e for e in entries if e["action"] == "alloc")  # the weight
    line = next(i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1)
                if t.startswith("w = torch.randn"))
    assert first["frames"][0] == {"filename": str(SCRIPT), "line": line, "name": "<module>"}
    assert first["category"] == "input"
    assert {e["category"] for e in entries} <= set(C.NAMES) | {"unknown"}
    assert any(e["category"] == "unknown" for e in entries)  # the viewer needs it once
    workspace = next(e for e in entries if e["action"] == "alloc" and e["size"] == 32 << 20)
    assert workspace["category"] == "other"


def test_the_oom_is_in_the_trace(exported):
    case, snap, _, data = exported
    ooms = [e for e in data["device_traces"][0] if e["action"] == "oom"]
    if case != "oom":
        assert ooms == []
        return
    [oom] = ooms
    assert oom["device_free"] == snap["summary"]["oom"]["free_bytes"]
    assert "raise OutOfMemoryError # 20.0GiB requested" in viz.trace(data)


def test_what_cannot_be_exported_says_why(exported):
    _, snap, _, _ = exported
    with pytest.raises(MemlensError, match="--max-allocations"):
        memory_viz_snapshot({**snap, "allocations": None})
    cpu = {**snap, "meta": {**snap["meta"], "device": {**snap["meta"]["device"], "type": "cpu"}}}
    with pytest.raises(MemlensError, match="cpu target"):
        memory_viz_snapshot(cpu)
