"""Per open document: the annotations of its newest snapshot, following the text through edits.

When annotations are attached, the document's text is taken as the text that was traced (unless
the file changed after the snapshot was made, or the editor holds unsaved changes: then they
start stale). Each edit maps the annotations' lines from the old text to the new and marks them
stale; getting back to the traced text makes them fresh again.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field

from .annotations import Annotation, annotate
from .edits import line_map, split_lines
from .index import SnapshotEntry
from .outline import outline


@dataclass
class Placed:
    line: int  # where it is now (0-based)
    annotation: Annotation
    code: str  # the line's text when the annotation was placed: edits move it with this code


@dataclass
class DocState:
    uri: str
    path: str
    text: str
    version: int | None = None
    entry: SnapshotEntry | None = None
    base_text: str = ""  # the text the annotations were computed against
    stale_at_attach: bool = False
    placed: list[Placed] = field(default_factory=list)
    by_line: dict[int, Placed] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # the text split at "\n" (kept current)

    def __post_init__(self) -> None:
        self.lines = split_lines(self.text)

    @property
    def stale(self) -> bool:
        return self.entry is not None and (self.stale_at_attach or self.text != self.base_text)

    def _index(self) -> None:
        self.by_line = {p.line: p for p in self.placed}

    def attach(self, entry: SnapshotEntry | None, top_lines: int) -> None:
        """Compute annotations from `entry` (None: no snapshot covers the document)."""
        self.entry = entry
        self.base_text = self.text
        self.placed = []
        if entry is None or entry.digest is None:
            self.stale_at_attach = False
            self._index()
            return
        self.stale_at_attach = changed_since(self.path, self.text, entry)
        info = outline(self.text)
        anns = annotate(entry.digest, self.path, info.in_init, top_lines)
        self.placed = [Placed(a.line, a, self.line_text(a.line)) for a in anns]
        self._index()

    def update_text(self, text: str, top_lines: int) -> None:
        """The document changed: move the annotations with their lines."""
        if text == self.text:
            return
        if self.entry is not None and text == self.base_text and not self.stale_at_attach:
            self.text, self.lines = text, split_lines(text)
            self.attach(self.entry, top_lines)  # back to the traced text: exact again
            return
        new_lines = split_lines(text)
        if self.placed:
            mapping = line_map(self.lines, new_lines, {p.line: p.code for p in self.placed})
            moved = []
            for p in self.placed:
                new = mapping.get(p.line)
                if new is not None:
                    moved.append(Placed(new, p.annotation, p.code))
            self.placed = moved
            self._index()
        self.text, self.lines = text, new_lines

    def line_text(self, line: int) -> str:
        return self.lines[line].rstrip("\r") if 0 <= line < len(self.lines) else ""


def changed_since(path: str, text: str, entry: SnapshotEntry) -> bool:
    """Whether the file differs from what the trace saw: saved after the snapshot was made, or
    the editor's text differs from the file on disk."""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8", newline="") as f:
            disk = f.read()
    except (OSError, UnicodeDecodeError):
        return False
    if disk.replace("\r\n", "\n") != text.replace("\r\n", "\n"):
        return True
    return st.st_mtime > entry.created + 1.0


def now_utc() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)
