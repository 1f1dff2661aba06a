"""Per open document: the annotations of its newest snapshot, following the text through edits.

The snapshot's lines are those of the text the trace read (`base`, from traced.py). Attaching
places each annotation by mapping that text to the document's; each edit then maps them from
the old text to the new. They are stale while the text differs from `base` (always, when `base`
is unknown); getting back to it makes them exact and fresh again.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

from .annotations import Annotation, annotate
from .edits import line_map, split_lines
from .index import SnapshotEntry
from .outline import outline


@dataclass
class Placed:
    line: int  # where it is now (0-based)
    annotation: Annotation
    code: str  # the line's text in the traced text: edits move the annotation with this code


@dataclass
class DocState:
    uri: str
    path: str
    text: str
    version: int | None = None
    entry: SnapshotEntry | None = None
    base: str | None = None  # the text the snapshot's lines refer to (None: not known)
    annotations: list[Annotation] = field(default_factory=list)  # at the lines of `base`
    placed: list[Placed] = field(default_factory=list)
    by_line: dict[int, Placed] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # the text split at "\n" (kept current)

    def __post_init__(self) -> None:
        self.lines = split_lines(self.text)

    @property
    def stale(self) -> bool:
        return self.entry is not None and self.text != self.base

    def attach(self, entry: SnapshotEntry | None, base: str | None, top_lines: int) -> None:
        """Show `entry` (None: no snapshot covers the document), whose lines are those of
        `base`."""
        self.entry, self.base, self.annotations = entry, _line_ends_like(base, self.text), []
        if entry is not None and entry.digest is not None:
            traced = self.base if self.base is not None else self.text
            in_init = outline(traced).in_init  # the snapshot's lines: the traced text's syntax
            self.annotations = annotate(entry.digest, self.path, in_init, top_lines)
        self._place()

    def _place(self) -> None:
        """Each annotation at its line of the current text, mapped from the traced text."""
        traced = split_lines(self.base) if self.base is not None else self.lines
        codes = {a.line: _line(traced, a.line) for a in self.annotations}
        mapping = None if traced == self.lines else line_map(traced, self.lines, codes)
        self.placed = []
        for a in self.annotations:
            line = a.line if mapping is None else mapping.get(a.line)
            if line is not None:
                self.placed.append(Placed(line, a, codes[a.line]))
        self._index()

    def update_text(self, text: str) -> None:
        """The document changed: move the annotations with their lines."""
        if text == self.text:
            return
        new_lines = split_lines(text)
        if text == self.base:  # back to the traced text: exact again
            self.text, self.lines = text, new_lines
            self._place()
            return
        if self.placed:
            mapping = line_map(self.lines, new_lines, {p.line: p.code for p in self.placed})
            self.placed = [Placed(mapping[p.line], p.annotation, p.code) for p in self.placed
                           if p.line in mapping]
            self._index()
        self.text, self.lines = text, new_lines

    def _index(self) -> None:
        self.by_line = {p.line: p for p in self.placed}

    def line_text(self, line: int) -> str:
        return _line(self.lines, line)


def _line(lines: list[str], line: int) -> str:
    return lines[line].rstrip("\r") if 0 <= line < len(lines) else ""


def _line_ends_like(base: str | None, text: str) -> str | None:
    """`base` with `text`'s line ends (an editor may hold a CRLF file with LF)."""
    if base is not None and "\r\n" in base and "\r\n" not in text:
        return base.replace("\r\n", "\n")
    return base


def now_utc() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)
