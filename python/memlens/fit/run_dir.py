"""The run folder of a search: everything a search traced, kept so that it survives the driver.

    RUN_DIR/fit.json                   the search: command, space, device, and every point's
                                       outcome (rewritten as results come in)
    RUN_DIR/fit.html                   the page of peaks against each axis (html_page.py)
    RUN_DIR/points/<point>/job.json    the job as this point runs it
    RUN_DIR/points/<point>/result.json the point's result (trace_point.py), written last
    RUN_DIR/points/<point>/snapshot.json (and snapshot.ranks/ for several ranks), trace.log

A point whose result.json exists is finished: running the same command again (same job, space,
device and iterations: the fingerprint) takes it from here instead of tracing it again. A
worker that failed leaves no result.json, so it is traced again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import MemlensError
from ..snapshot.output_files import write_atomically

FIT_FORMAT, FIT_VERSION = "memlens.fit", 1
INDEX, RESULT = "fit.json", "result.json"


def fingerprint(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


class RunDir:
    def __init__(self, path: Path, identity: dict[str, Any]):
        self.path = path
        self.fingerprint = fingerprint(identity)
        index = path / INDEX
        if index.is_file():
            try:
                old = json.loads(index.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise MemlensError(f"cannot read the run folder's {INDEX}: {e}",) from None
            if old.get("fingerprint") != self.fingerprint:
                raise MemlensError(
                    f"the run folder {path} holds another search (another job, space, device "
                    "or iterations): give another --run-dir, or remove that folder")
        path.mkdir(parents=True, exist_ok=True)

    def point_folder(self, name: str) -> Path:
        return self.path / "points" / name

    def finished(self, name: str, key: str) -> dict[str, Any] | None:
        """The result an earlier run recorded for this point, if any."""
        f = self.point_folder(name) / RESULT
        if not f.is_file():
            return None
        try:
            saved = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # cut short while written: trace again
        return saved["result"] if saved.get("key") == key else None

    def save_result(self, name: str, key: str, result: dict[str, Any]) -> None:
        text = json.dumps({"key": key, "result": result}, indent=1) + "\n"
        write_atomically(self.point_folder(name) / RESULT, lambda f: f.write(text), "fit result")

    def save_index(self, document: dict[str, Any]) -> Path:
        text = json.dumps({"format": FIT_FORMAT, "version": FIT_VERSION,
                           "fingerprint": self.fingerprint, **document}, indent=1) + "\n"
        return write_atomically(self.path / INDEX, lambda f: f.write(text), "fit index")
