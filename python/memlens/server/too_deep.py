"""A workspace file too deep for Python's parser (`x.b.b.b…` 2000 times, a sum of 100,000
terms) raises RecursionError from `ast.parse` or from a walk of its tree. One such file must not
hide the targets of every other file: it becomes an ordinary error about that file, which the
workspace scan logs and skips (targets.document_targets is the one caller)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import MemlensError

T = TypeVar("T")


def or_too_deep(path: str, read: Callable[[], T]) -> T:
    """`read()`, with a RecursionError turned into a MemlensError naming `path`."""
    try:
        return read()
    except RecursionError:
        raise MemlensError(f"{path}: skipped: nested too deeply for Python's parser (no "
                           "trace targets read from it)") from None
