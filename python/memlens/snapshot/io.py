"""Read and write snapshot files. A snapshot may come from someone else: reading checks the
format, the version, the schema and every cross-reference before anything trusts it."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import SnapshotError
from .references import check_references

FORMAT = "memlens.snapshot"
VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")
MAX_SNAPSHOT_BYTES = 2 * 1024**3
MAX_NESTING = 64  # levels of lists and objects; a snapshot has under 10


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=1)
def _validator():
    # Compiled to Python once per process: several times faster than jsonschema on snapshots of
    # 100,000 tensors (bench/README.md), which the language server reads on every open. With
    # the `$ref`s inlined: fastjsonschema calls a referenced definition with a name built by
    # `.format(**locals())` of its one huge function, for every tensor (10x the time).
    import fastjsonschema

    return fastjsonschema.compile({k: v for k, v in _inlined(schema()).items() if k != "$defs"})


def write_snapshot(snapshot: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write atomically (a reader never sees half a file), never over a file that is not a
    snapshot (output_files.py); raises OutputError naming the path and the cause."""
    from .output_files import write_atomically

    return write_atomically(path, lambda f: json.dump(snapshot, f, separators=(",", ":")),
                            "snapshot", only_over_snapshots=True)


def read_snapshot(path: str | os.PathLike, keep_allocations: bool = True) -> dict[str, Any]:
    """Read and validate a snapshot (format, version, schema, cross-references).
    `keep_allocations=False` drops the allocation stream before validating it (the language
    server's digest needs none of it: less memory and time on large snapshots)."""
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"{path}: no such snapshot file")
    if path.stat().st_size > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"{path}: file is larger than {MAX_SNAPSHOT_BYTES} bytes; not a snapshot")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SnapshotError(f"{path}: not a snapshot (not UTF-8 text)") from None
    try:
        doc = json.loads(text, parse_constant=_not_json)
    except _NotJSON as e:
        raise SnapshotError(f"{path}: not a snapshot ({e} is not a JSON number)") from None
    except json.JSONDecodeError as e:
        hint = " (the file looks truncated)" if e.pos >= len(text) - 1 else ""
        raise SnapshotError(f"{path}: not valid JSON at line {e.lineno} column {e.colno}{hint}") from None
    except RecursionError:
        raise SnapshotError(f"{path}: not a snapshot (nested too deeply)") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise SnapshotError(f"{path}: not a snapshot ({e})") from None
    del text
    if not keep_allocations and isinstance(doc, dict) and doc.get("allocations") is not None:
        doc["allocations"] = None
    if _nesting_exceeds(doc, MAX_NESTING):
        raise SnapshotError(f"{path}: not a snapshot (values nested more than {MAX_NESTING} "
                            "deep)")
    validate_snapshot(doc, str(path))
    return doc


def _nesting_exceeds(doc: Any, limit: int) -> bool:
    """Whether a list or object lies more than `limit` levels down. json reads ~1,000 levels;
    every reader after it (the schema, the report's escaping) walks values recursively, and a
    snapshot's own nesting is a handful of levels. Iterative, over containers only."""
    level = [doc] if type(doc) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for c in level:
            values = c.values() if type(c) is dict else c
            kinds = set(map(type, values))  # at C speed: most lists hold only numbers
            if dict in kinds or list in kinds:
                below.extend(v for v in values if type(v) is dict or type(v) is list)
        level = below
    return False


class _NotJSON(ValueError):
    pass


def _not_json(constant: str):
    """NaN, Infinity and -Infinity: Python's json reads them, JSON has no such numbers."""
    raise _NotJSON(constant)


def validate_snapshot(doc: Any, name: str = "snapshot") -> None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError(f"{name}: not a memlens snapshot (expected \"format\": \"{FORMAT}\")")
    version = doc.get("version")
    if version != VERSION:
        raise SnapshotError(f"{name}: snapshot version {version!r} is not supported by this "
                            f"memlens (reads version {VERSION}); upgrade memlens to read it")
    import fastjsonschema

    try:
        _validator()(doc)
    except fastjsonschema.JsonSchemaValueException as e:
        path, message = _deepest(e)
        where = "/".join(str(p) for p in path) or "(top level)"
        raise SnapshotError(f"{name}: invalid snapshot at {where}: {message[:200]}") from None
    check_references(doc, name)


def _deepest(error) -> tuple[list, str]:
    """The place and message inside a failed "null, or an object with…" (oneOf): fastjsonschema
    names only the oneOf; the panel's validator, and a user, want the value that is wrong."""
    import fastjsonschema

    path, message = list(error.path[1:]), error.message.removeprefix(error.name).lstrip()
    while error.rule == "oneOf":
        branches = [b for b in error.definition["oneOf"] if b.get("type") != "null"]
        if error.value is None or len(branches) != 1:
            break
        try:
            fastjsonschema.compile(_inlined(branches[0]))(error.value)
            break
        except fastjsonschema.JsonSchemaValueException as inner:
            error = inner
            path += inner.path[1:]
            message = inner.message.removeprefix(inner.name).lstrip()
    return path, message


def _inlined(definition: Any) -> Any:
    """A part of the schema with its `#/$defs/…` references replaced by what they name (the
    definitions are not recursive), so it compiles on its own."""
    if isinstance(definition, list):
        return [_inlined(d) for d in definition]
    if not isinstance(definition, dict):
        return definition
    ref = definition.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return _inlined(schema()["$defs"][ref.removeprefix("#/$defs/")])
    return {k: _inlined(v) for k, v in definition.items()}
