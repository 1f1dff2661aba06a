"""A snapshot reduced to what the language server shows: the peak, the modules with their source
positions, and the source lines with their bytes by category.

Reading a snapshot means parsing JSON that may be tens of MB and validating it against the
schema (seconds for a large model); the server does that in a helper process,

    python -m memlens.snapshot.digest SNAPSHOT...   # one JSON digest per line on stdout

so that its own memory and latency stay flat. The digest is small (a few hundred KB for a
Llama-7B trace) and plain JSON. The allocation stream, which the server never reads, is not
validated here (`memlens show` and the panel do).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TypedDict, Union

from .. import categories as C
from ..errors import SnapshotError
from ..worker.protocol import normalize_path

CATEGORIES = C.NAMES

# -- the digest: what crosses from the worker (or the helper process) to the language server --
Position = list  # [normalized file, line]


class DigestMeta(TypedDict):
    targetKind: str
    targetName: str
    targetPath: Union[str, None]
    targetArgs: list[str]
    targetCwd: Union[str, None]
    created: str  # ISO 8601
    deviceName: str
    deviceDisplayName: str
    deviceType: str
    deviceTotalBytes: int
    deviceKey: str
    worldSize: int
    rank: int
    iterations: int
    precision: Union[str, None]


class DigestSubcategory(TypedDict):
    label: str
    atPeakBytes: int
    peakBytes: int


class DigestSummary(TypedDict):
    peakBytes: int
    peakPhase: Union[str, None]
    fits: Union[bool, None]  # the verdict every view shows (snapshot/device_memory.py)
    headroomBytes: Union[int, None]
    categoriesAtPeak: dict[str, int]
    subcategories: list[DigestSubcategory]


class DigestModule(TypedDict):
    fqn: str
    cls: str
    group: Any
    source: Union[Position, None]
    constructedAt: Union[Position, None]
    bytes: dict[str, int]  # by category: the module's own bytes over the step
    atPeak: dict[str, int]  # by category: its bytes alive at the peak


class DigestLine(TypedDict):
    file: str
    line: int
    bytesAtPeak: int
    totalBytes: int
    allocations: int
    categories: dict[str, int]  # bytes alive at the peak by category


class Digest(TypedDict):
    path: str
    meta: DigestMeta
    summary: DigestSummary
    modules: list[DigestModule]
    lines: list[DigestLine]
    files: list[str]  # every source file it annotates, normalized


class DigestError(TypedDict):
    path: str
    error: str  # why the snapshot cannot be used


def _norm(path: str, cache: dict[str, str]) -> str:
    out = cache.get(path)
    if out is None:
        out = cache[path] = normalize_path(path)
    return out


def read_checked(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a snapshot, leaving out the allocation stream."""
    from ..snapshot.io import read_snapshot

    return read_snapshot(path, keep_allocations=False)


def _cats(values: dict[str, int]) -> dict[str, int]:
    return {c: int(values.get(c, 0)) for c in CATEGORIES}


def digest(doc: dict[str, Any], path: str) -> Digest:
    """The server's view of a validated snapshot document."""
    cache: dict[str, str] = {}
    meta, summary = doc["meta"], doc["summary"]
    target = meta.get("target") or {}
    device = meta["device"]
    files: set[str] = set()

    def pos(p: dict[str, Any] | None) -> list[Any] | None:
        if not p:
            return None
        f = _norm(p["file"], cache)
        files.add(f)
        return [f, int(p["line"])]

    modules: list[DigestModule] = []
    for m in doc["modules"]:
        modules.append({
            "fqn": m["fqn"], "cls": m["class"], "group": m["group"],
            "source": pos(m.get("source")), "constructedAt": pos(m.get("constructed_at")),
            "bytes": {c: int(m.get(f"{c}_bytes", 0)) for c in CATEGORIES},
            "atPeak": _cats(m["at_peak"]),
        })

    # Bytes alive at the peak per source line and category, from the tensors alive at the peak
    # (each attributed to the innermost user frame of its stack, as `lines` is).
    frames, stacks = doc["frames"], doc["stacks"]
    by_line: dict[tuple[str, int], dict[str, int]] = {}
    for t in doc["tensors"]:
        stack = stacks[t["stack"]]
        if not stack:
            continue
        fr = frames[stack[0]]
        key = (_norm(fr["file"], cache), int(fr["line"]))
        cats = by_line.setdefault(key, {})
        cats[t["category"]] = cats.get(t["category"], 0) + int(t["bytes"])
    lines: list[DigestLine] = []
    for ln in doc["lines"]:
        f = _norm(ln["file"], cache)
        files.add(f)
        lines.append({"file": f, "line": int(ln["line"]), "bytesAtPeak": int(ln["bytes_at_peak"]),
                      "totalBytes": int(ln["total_bytes"]), "allocations": int(ln["allocations"]),
                      "categories": by_line.get((f, int(ln["line"])), {})})

    return {
        "path": str(path),
        "meta": {
            "targetKind": target.get("kind", ""), "targetName": target.get("name", ""),
            "targetPath": _norm(target["path"], cache) if target.get("path") else None,
            "targetArgs": list(target.get("args") or []), "targetCwd": target.get("cwd"),
            "created": meta["created"], "deviceName": device["name"],
            "deviceDisplayName": device.get("display_name", device["name"]),
            "deviceType": device["type"], "deviceTotalBytes": int(device["total_memory_bytes"]),
            "deviceKey": meta["device_key"], "worldSize": int(meta["world_size"]),
            "rank": int(meta["rank"]), "iterations": int(meta["iterations"]),
            "precision": meta.get("precision"),
        },
        "summary": {"peakBytes": int(summary["peak_bytes"]), "peakPhase": summary["peak_phase"],
                    # the verdict every view shows (snapshot/device_memory.py); None: none
                    "fits": summary.get("fits"), "headroomBytes": summary.get("headroom_bytes"),
                    "categoriesAtPeak": _cats(summary["categories_at_peak"]),
                    "subcategories": [{"label": str(sub["label"]),
                                       "atPeakBytes": int(sub["at_peak_bytes"]),
                                       "peakBytes": int(sub["peak_bytes"])}
                                      for sub in summary.get("subcategories", ())]},
        "modules": modules,
        "lines": lines,
        "files": sorted(files),
    }


def digest_file(path: str | os.PathLike) -> Digest | DigestError:
    """Read, validate and digest one snapshot; a bad file gives {"path", "error"}."""
    try:
        return digest(read_checked(path), str(path))
    except SnapshotError as e:
        return {"path": str(path), "error": e.message}
    except (KeyError, TypeError, ValueError, IndexError, RecursionError) as e:
        # The schema admits it but the digest cannot use it: still the snapshot's fault.
        return {"path": str(path), "error": f"{path}: unusable snapshot ({type(e).__name__}: {e})"}


def main(argv: list[str]) -> int:
    for path in argv:
        sys.stdout.write(json.dumps(digest_file(path), separators=(",", ":")) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
