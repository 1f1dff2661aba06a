"""The text a snapshot's line numbers refer to: each source file as the trace read it.

A snapshot records lines, not text, and the editor's text may have moved on since (edits,
saves). Annotations are placed by mapping this text to the editor's (edits.line_map), so it
must outlive saves, index refreshes and documents closed and opened again:

- for a trace this server runs, the files as they were on disk when its worker started (the
  open documents and the target's own files), kept while the snapshot is in the index;
- for any other snapshot (the CLI's), a file not modified since the snapshot was made is taken
  as it is on disk.

Otherwise the text is unknown (None): annotations stay at the snapshot's lines, marked stale.
"""

from __future__ import annotations

import os
from typing import Iterable

from .index import SnapshotEntry

# File times and the snapshot's `created` come from different clocks and roundings.
MTIME_SLACK_S = 1.0


class TracedTexts:
    def __init__(self) -> None:
        self._by_snapshot: dict[str, dict[str, str]] = {}  # snapshot path -> {file: text}

    def capture(self, snapshot: str, files: Iterable[str]) -> None:
        """Remember `files` as they are on disk now, for the snapshot a trace will write."""
        texts = {f: text for f in files if (text := read_text(f)) is not None}
        self._by_snapshot[_key(snapshot)] = texts

    def text_of(self, entry: SnapshotEntry, file: str) -> str | None:
        captured = self._by_snapshot.get(_key(entry.path), {})
        if file in captured:
            return captured[file]
        return unchanged_text(file, entry.created)

    def retain(self, snapshots: set[str]) -> None:
        """Forget the texts of snapshots no longer in use (superseded, deleted, never written)."""
        keep = {_key(p) for p in snapshots}
        for path in [p for p in self._by_snapshot if p not in keep]:
            del self._by_snapshot[path]


def _key(snapshot: str) -> str:
    return os.path.realpath(snapshot)  # the runner's and the index's spelling may differ


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as f:  # line ends as the editor has them
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def unchanged_text(path: str, created: float) -> str | None:
    """The file's text, if it was last written before the snapshot was made."""
    try:
        if os.stat(path).st_mtime > created + MTIME_SLACK_S:
            return None
    except OSError:
        return None
    return read_text(path)
