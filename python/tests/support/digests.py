"""A snapshot digest written by hand (the shape snapshot/digest.py makes), for the tests of what
the language server shows: a model `Net` in F with four `Block`s, a head and hot lines."""

from __future__ import annotations

from memlens.server.index import SnapshotEntry

CATS = ("parameter", "buffer", "gradient", "optimizer_state", "activation", "temporary", "input",
        "other")
F = "/src/model.py"
MiB = 1024**2


def module(fqn, cls, group, source_line=None, constructed_line=None, **bytes_):
    b = {c: bytes_.get(c, 0) for c in CATS}
    at = {c: bytes_.get(f"at_{c}", 0) for c in CATS}
    return {"fqn": fqn, "cls": cls, "group": group,
            "source": [F, source_line] if source_line else None,
            "constructedAt": [F, constructed_line] if constructed_line else None,
            "bytes": b, "atPeak": at}


def digest(modules, lines=(), peak=100 * MiB):
    return {"path": "/s.json", "meta": {
        "targetKind": "model", "targetName": "Net", "targetPath": F, "targetArgs": [],
        "targetCwd": None, "created": "2026-01-01T00:00:00+00:00", "deviceName": "h100-80gb",
        "deviceDisplayName": "NVIDIA H100 80GB HBM3", "deviceType": "cuda",
        "deviceTotalBytes": 80 * 1024**3, "deviceKey": "cuda:0", "worldSize": 8, "rank": 3,
        "iterations": 2, "precision": "bf16"},
        "summary": {"peakBytes": peak, "peakPhase": "forward_backward_iter_1",
                    "categoriesAtPeak": {}},
        "modules": list(modules), "lines": list(lines), "files": [F]}


NET = digest([
    module("", "Net", "", source_line=10, parameter=8 * MiB, gradient=8 * MiB,
           optimizer_state=16 * MiB, activation=40 * MiB, at_parameter=8 * MiB,
           at_activation=40 * MiB),
    module("layers", "ModuleList", "layers", constructed_line=14, parameter=8 * MiB,
           activation=40 * MiB),
    *[module(f"layers.{i}", "Block", "layers.*", source_line=30, constructed_line=14,
             parameter=2 * MiB, gradient=2 * MiB, optimizer_state=4 * MiB,
             activation=10 * MiB, at_parameter=2 * MiB, at_activation=10 * MiB)
      for i in range(4)],
    module("head", "Sequential", "head", constructed_line=15, parameter=MiB),
    module("head.0", "Linear", "head.0", constructed_line=15, parameter=MiB),
    module("head.1", "ReLU", "head.1", constructed_line=15),
    module("drop", "Dropout", "drop", constructed_line=16),
], lines=[
    {"file": F, "line": 40, "bytesAtPeak": 30 * MiB, "totalBytes": 60 * MiB, "allocations": 8,
     "categories": {"activation": 20 * MiB, "temporary": 10 * MiB}},
    {"file": F, "line": 41, "bytesAtPeak": 5 * MiB, "totalBytes": 5 * MiB, "allocations": 1,
     "categories": {"activation": 5 * MiB}},
    {"file": F, "line": 12, "bytesAtPeak": 50 * MiB, "totalBytes": 50 * MiB, "allocations": 3,
     "categories": {"parameter": 50 * MiB}},  # inside __init__: not a hot line
    {"file": F, "line": 42, "bytesAtPeak": 1024, "totalBytes": 1024, "allocations": 1,
     "categories": {"activation": 1024}},
    {"file": "/other.py", "line": 1, "bytesAtPeak": 99 * MiB, "totalBytes": 0,
     "allocations": 1, "categories": {}},
])


def entry(path="/s/1.json", created="2026-01-01T00:00:00+00:00"):
    """NET as a snapshot entry of the index (its creation time `created`)."""
    d = {**NET, "meta": {**NET["meta"], "created": created}}
    return SnapshotEntry("/ws", "/ws/.memlens/x", path, 0.0, digest=d, files=frozenset([F]))
