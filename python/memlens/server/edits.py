"""Annotations follow their lines through edits: map each line of the old text to the new text
by a line diff. Unchanged lines are paired by the diff. Within a block of changed lines, old
and new lines pair up in order, as many as can, each old line with the new line most like it;
a line whose original code is known (an anchor) prefers the new line that equals or contains
that code. So a line split by Enter keeps its annotation on the half that holds its code, not
on the half that stayed in its place. Old lines left over were deleted.
"""

from __future__ import annotations

import difflib

# Old × new lines of one changed block compared by content; a larger block (a paste over a
# region) pairs in order, as comparing every pair would stall the editor.
ALIGN_LIMIT = 400
# Characters of a line compared: enough to tell lines apart, bounded for minified code.
COMPARED_CHARS = 200


def line_map(old: list[str], new: list[str], anchors: dict[int, str] | None = None
             ) -> dict[int, int]:
    """{old line: new line} (0-based) for every old line that survives the edit. `anchors`:
    {old line: the code it should stay with}."""
    anchors = anchors or {}
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
                i0, j0 = head + i1, head + j1
                codes = [anchors.get(i) for i in range(i0, head + i2)]
                for i, j in align(old[i0:head + i2], new[j0:head + j2], codes):
                    out[i0 + i] = j0 + j
    return out


def align(old: list[str], new: list[str], codes: list[str | None]) -> list[tuple[int, int]]:
    """Pairs (old, new), increasing in both: as many as there can be, then the most alike."""
    n, m = len(old), len(new)
    if n * m > ALIGN_LIMIT:
        return [(k, k) for k in range(min(n, m))]
    # best[i][j]: (pairs, likeness) of the best alignment of old[i:] with new[j:]; took[i][j]:
    # it pairs old[i] with new[j] (on a tie too: a line keeps its place when nothing is better).
    best = [[(0, 0.0)] * (m + 1) for _ in range(n + 1)]
    took = [[False] * m for _ in range(n)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            pairs, score = best[i + 1][j + 1]
            take = (pairs + 1, score + likeness(old[i], new[j], codes[i]))
            skip = max(best[i + 1][j], best[i][j + 1])
            best[i][j], took[i][j] = max(take, skip), take >= skip
    out, i, j = [], 0, 0
    while i < n and j < m:
        if took[i][j]:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return out


def likeness(old: str, new: str, code: str | None) -> float:
    """How well `new` continues `old`: 0..1 by similarity, plus 2 when it is the original
    code itself, plus 1 when it contains it."""
    a, b = old.strip()[:COMPARED_CHARS], new.strip()[:COMPARED_CHARS]
    score = difflib.SequenceMatcher(None, a, b).ratio()
    code = (code or "").strip()
    if code and b == code[:COMPARED_CHARS]:
        score += 2.0
    elif code and code in new:
        score += 1.0
    return score


def split_lines(text: str) -> list[str]:
    return text.split("\n")
