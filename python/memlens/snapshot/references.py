"""The rules the JSON Schema cannot say: every index into the document's own tables points
inside it, and parallel arrays have the same length. The same rules, in the same order and with
the same messages, as common/validate.ts (test/unit/validate-parity.test.ts runs both on the
same mutated snapshots): a report the CLI writes is one the panel opens, and the other way round."""

from __future__ import annotations

from typing import Any

from ..errors import SnapshotError

# The allocation stream's columns, one entry per allocation.
COLUMNS = ("device", "bytes", "requested_bytes", "category", "module", "op", "stack", "stream",
           "alloc_seq", "free_seq")


def check_references(doc: dict[str, Any], name: str) -> None:
    """Raise SnapshotError naming the first index outside its table or the first ragged row."""
    bad = _first_bad_reference(doc)
    if bad:
        raise SnapshotError(f"{name}: invalid snapshot at {bad}")


def _first_bad_reference(doc: dict[str, Any]) -> str | None:
    return _top(doc) or _tensors(doc) or _allocations(doc)


def _top(doc: dict[str, Any]) -> str | None:
    n_frames = len(doc["frames"])
    for i, stack in enumerate(doc["stacks"]):
        if any(f >= n_frames for f in stack):
            return f"stacks/{i}: frame index out of range"
    columns = len(doc["timeline"]["columns"])
    for i, row in enumerate(doc["timeline"]["points"]):
        if len(row) != columns:
            return f"timeline/points/{i}: {len(row)} values, expected {columns}"
    names = set(doc["timeline"]["columns"])
    for i, stream in enumerate(doc["timeline"].get("streams", ())):
        if stream["column"] not in names:
            return f"timeline/streams/{i}: column not in timeline/columns"
    oom = doc["summary"].get("oom")
    if oom and oom.get("stack", 0) >= len(doc["stacks"]):
        return "summary/oom/stack: index out of range"
    return None


def _tensors(doc: dict[str, Any]) -> str | None:
    n_stacks, n_modules = len(doc["stacks"]), len(doc["modules"])
    n_phases = max(len(doc["phases"]), 1)
    for i, t in enumerate(doc["tensors"]):
        if t["stack"] >= n_stacks or t["module"] >= n_modules or t["phase"] >= n_phases:
            return f"tensors/{i}: index out of range"
    if doc["summary"]["peak_tensor"] >= len(doc["tensors"]):
        return "summary/peak_tensor: index out of range"
    return None


def _allocations(doc: dict[str, Any]) -> str | None:
    alloc = doc.get("allocations")
    if not alloc:
        return None
    n = len(alloc["bytes"])
    for key in (*COLUMNS, "backward", "subcategory"):
        if key in alloc and len(alloc[key]) != n:
            return f"allocations/{key}: {len(alloc[key])} entries, expected {n}"
    n_modules, n_ops, n_stacks = len(doc["modules"]), len(doc["ops"]), len(doc["stacks"])
    n_devices = len(alloc["devices"])
    for i, (module, op, stack, device) in enumerate(zip(alloc["module"], alloc["op"],
                                                        alloc["stack"], alloc["device"])):
        if module >= n_modules or op >= n_ops or stack >= n_stacks or device >= n_devices:
            return f"allocations/{i}: index out of range"
    return None
