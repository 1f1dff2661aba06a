"""Annotations follow their lines through edits: map each line of the old text to the new text
by a line diff. A line that was changed in place keeps its annotation; a deleted line loses it.
"""

from __future__ import annotations

import difflib


def line_map(old: list[str], new: list[str]) -> dict[int, int]:
    """{old line: new line} (0-based) for every old line that survives the edit."""
    n_old, n_new = len(old), len(new)
    # The common head and tail are cheap to match and are most of the file on a keystroke.
    head = 0
    while head < n_old and head < n_new and old[head] == new[head]:
        head += 1
    tail = 0
    while (tail < n_old - head and tail < n_new - head
           and old[n_old - 1 - tail] == new[n_new - 1 - tail]):
        tail += 1
    out = {i: i for i in range(head)}
    shift = n_new - n_old
    for i in range(n_old - tail, n_old):
        out[i] = i + shift
    a, b = old[head:n_old - tail], new[head:n_new - tail]
    if a and b:
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    out[head + i1 + k] = head + j1 + k
            elif tag == "replace":
                # Lines edited in place: pair them up in order; extra old lines were deleted.
                for k in range(min(i2 - i1, j2 - j1)):
                    out[head + i1 + k] = head + j1 + k
    return out


def split_lines(text: str) -> list[str]:
    return text.split("\n")
