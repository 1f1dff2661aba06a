"""From a snapshot digest to what one source file shows: pure functions, no LSP.

Three kinds of annotation, each on one line of the file:
- `class`: the definition of a traced module class: the bytes of its instances;
- `construct`: a line in a parent's `__init__` that constructs submodules (`self.h = ...`);
- `line`: the lines outside `__init__` (forward, helpers, a script's body) that hold the most
  bytes at the peak.

Module texts read `≈ 7.4 GiB · 6.1 GiB act ×32`: per instance, the most important number first
(parameters, gradients, optimizer state and activations together, then the activations), no
zero segment, the instance count; at most ~40 characters, so that neither the minimap nor an
inlay hint's truncation hides them. The colour is the share of the peak of the same total. The
hover has the detail: per instance, all instances, what is alive at the peak, and the share of
the peak. Line texts read `≈ 2.0 MiB at peak (15.8%) · act` (the largest category).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..units import format_bytes
from ..snapshot.digest import CATEGORIES, Digest

LABELS = {"parameter": "parameters", "buffer": "buffers", "gradient": "gradients",
          "optimizer_state": "optimizer state", "activation": "activations",
          "temporary": "temporaries", "input": "inputs", "other": "other"}
SHORT = {"parameter": "params", "buffer": "buffers", "gradient": "grads",
         "optimizer_state": "optim", "activation": "act", "temporary": "tmp", "input": "input",
         "other": "other"}
ALWAYS_SHOWN = ("parameter", "gradient", "optimizer_state", "activation", "temporary")
MODEL_STATE = ("parameter", "gradient", "optimizer_state")
CONTAINERS = ("ModuleList", "ModuleDict", "Sequential")


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~])")


def md_code(text: object, limit: int = 120) -> str:
    """A snapshot's string (untrusted) as inline code: no way out of the code span, no table
    breaks, bounded length."""
    s = " ".join(str(text).split()).replace("`", "'").replace("|", "¦")
    if len(s) > limit:
        s = s[:limit - 1] + "…"
    return f"`{s}`" if s else "`(none)`"


def md_text(text: object, limit: int = 120) -> str:
    """A snapshot's string as plain markdown text (special characters escaped)."""
    s = " ".join(str(text).split())
    if len(s) > limit:
        s = s[:limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", s)


@dataclass
class Annotation:
    line: int  # 0-based, in the file as it was traced
    kind: str  # "class" | "construct" | "line"
    label: str
    text: str
    bytes: int  # alive at the peak
    share: float
    body: str  # hover markdown without the footer (which holds the snapshot's age)


def share_text(share: float) -> str:
    if share <= 0:
        return "0%"
    if share < 0.001:
        return "<0.1%"
    return f"{100 * share:.1f}%"


def _is_inside(fqn: str, outer: str) -> bool:
    """`fqn` is a submodule of `outer` (the model itself, "", contains everything)."""
    return outer == "" and fqn != "" or fqn.startswith(outer + ".")


def _drop_nested(mods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = [m["fqn"] for m in mods]
    return [m for m in mods if not any(_is_inside(m["fqn"], o) for o in names if o != m["fqn"])]


def _prefer_homogeneous_children(tops: list[dict[str, Any]], pool: list[dict[str, Any]]
                                 ) -> list[dict[str, Any]]:
    """A ModuleList of identical blocks built on the same line reads better as the blocks
    (`h.*` Block ×12) than as one container."""
    out = []
    for m in tops:
        if m["cls"] in CONTAINERS:
            depth = m["fqn"].count(".") + (1 if m["fqn"] else 0)
            kids = [k for k in pool if _is_inside(k["fqn"], m["fqn"])
                    and k["fqn"].count(".") == depth]
            if kids and len({k["cls"] for k in kids}) == 1:
                out.extend(kids)
                continue
        out.append(m)
    return out


def _label(mods: list[dict[str, Any]], root_name: str) -> str:
    groups: list[str] = []
    for m in mods:
        g = m["group"] if m["fqn"] else root_name
        if g not in groups:
            groups.append(g)
    return ", ".join(groups[:3]) + (", …" if len(groups) > 3 else "")


def _module_annotation(kind: str, line: int, mods: list[dict[str, Any]], peak: int,
                       root_name: str) -> Annotation | None:
    n = len(mods)
    total = {c: sum(m["bytes"][c] for m in mods) for c in CATEGORIES}
    at_peak = {c: sum(m["atPeak"][c] for m in mods) for c in CATEGORIES}
    alive = sum(at_peak.values())
    state = sum(total[c] for c in MODEL_STATE)
    act = total["activation"]
    if not (state or act):  # only temporaries: the hot lines show them
        return None
    text = (f"≈ {format_bytes((state + act) // n)}"
            + (f" · {format_bytes(act // n)} act" if act // n else "")
            + (f" ×{n}" if n > 1 else ""))
    # The colour's share is of the number the text says (all instances), not of what is alive
    # at the peak: two lines that read alike are coloured alike.
    share = min(1.0, (state + act) / peak) if peak else 0.0
    label = _label(mods, root_name)
    classes = sorted({m["cls"] for m in mods})
    names = ", ".join(md_code(m["fqn"] or root_name) for m in mods[:4]) + (", …" if n > 4 else "")
    if kind == "class":
        head = f"**class {md_code(classes[0])}** · {n} instance{'s' if n > 1 else ''}: {names}"
    else:
        head = (f"**constructs** {names} ({', '.join(md_code(c) for c in classes[:4])}"
                f"{f' ×{n}' if n > 1 else ''})")
    rows = ["| | per instance | × " + str(n) + " | at the peak | share of peak |",
            "|:--|--:|--:|--:|--:|"]
    for c in CATEGORIES:
        if c not in ALWAYS_SHOWN and not (total[c] or at_peak[c]):
            continue
        rows.append(f"| {LABELS[c]} | {format_bytes(total[c] // n)} | {format_bytes(total[c])} "
                    f"| {format_bytes(at_peak[c])} | {share_text(at_peak[c] / peak if peak else 0)}"
                    " |")
    rows.append(f"| **total** | | | **{format_bytes(alive)}** | "
                f"**{share_text(alive / peak if peak else 0)}** |")
    note = ("*per instance* and *× " + str(n) + "*: the most each category held during training; "
            "*at the peak*: what was alive at the moment of the peak.")
    body = "\n".join([head, "", *rows, "", note])
    return Annotation(line - 1, kind, label, text, alive, share, body)


def module_annotations(digest: Digest, path: str) -> list[Annotation]:
    peak = digest["summary"]["peakBytes"]
    root_name = next((m["cls"] for m in digest["modules"] if m["fqn"] == ""), "model")
    by_class: dict[int, list[dict[str, Any]]] = {}
    by_construct: dict[int, list[dict[str, Any]]] = {}
    for m in digest["modules"]:
        src = m["source"]
        if src and src[0] == path:
            by_class.setdefault(src[1], []).append(m)
        con = m["constructedAt"]
        if con and con[0] == path:
            by_construct.setdefault(con[1], []).append(m)
    out = []
    for line, mods in by_class.items():
        a = _module_annotation("class", line, _drop_nested(mods), peak, root_name)
        if a:
            out.append(a)
    class_lines = set(by_class)
    for line, mods in by_construct.items():
        if line in class_lines:
            continue
        tops = _prefer_homogeneous_children(_drop_nested(mods), mods)
        a = _module_annotation("construct", line, tops, peak, root_name)
        if a:
            out.append(a)
    return out


def line_annotations(digest: Digest, path: str, skip: set[int],
                     in_init: Callable[[int], bool], top: int) -> list[Annotation]:
    """The `top` lines of `path` holding the most bytes at the peak, outside `__init__` bodies
    and the lines in `skip` (1-based)."""
    peak = digest["summary"]["peakBytes"]
    candidates = [ln for ln in digest["lines"]
                  if ln["file"] == path and ln["bytesAtPeak"] > 0 and ln["line"] > 0
                  and ln["line"] not in skip and not in_init(ln["line"])]
    candidates.sort(key=lambda ln: (-ln["bytesAtPeak"], ln["line"]))
    out = []
    for ln in candidates[:top]:
        b = ln["bytesAtPeak"]
        share = b / peak if peak else 0.0
        cats = sorted(((c, v) for c, v in ln["categories"].items() if v > 0),
                      key=lambda cv: -cv[1])
        what = SHORT.get(cats[0][0], cats[0][0]) if cats else ""  # the rest in the hover
        text = f"≈ {format_bytes(b)} at peak ({share_text(share)})" + (f" · {what}" if what else "")
        rows = ["| | at the peak | share of peak |", "|:--|--:|--:|"]
        for c, v in cats:
            rows.append(f"| {LABELS.get(c, c)} | {format_bytes(v)} | "
                        f"{share_text(v / peak if peak else 0)} |")
        head = (f"**Line {ln['line']}** · {format_bytes(b)} alive at the peak "
                f"({share_text(share)} of the peak) · {format_bytes(ln['totalBytes'])} allocated "
                f"over the trace in {ln['allocations']:,} allocation"
                f"{'s' if ln['allocations'] != 1 else ''}")
        body = "\n".join([head, "", *rows])
        out.append(Annotation(ln["line"] - 1, "line", f"line {ln['line']}", text, b, share, body))
    return out


def annotate(digest: Digest, path: str, in_init: Callable[[int], bool] = lambda n: False,
             top_lines: int = 5) -> list[Annotation]:
    """Every annotation of the file `path` (normalized as in the digest), sorted by line."""
    mods = module_annotations(digest, path)
    taken = {a.line + 1 for a in mods}
    lines = line_annotations(digest, path, taken, in_init, top_lines)
    return sorted(mods + lines, key=lambda a: a.line)


def age_text(created: str, now: _dt.datetime | None = None) -> str:
    try:
        when = _dt.datetime.fromisoformat(created)
    except ValueError:
        return "at an unknown time"
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    s = max(0, int((now - when).total_seconds()))
    if s < 60:
        return "just now"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"


def footer(digest: Digest, budget: int, now: _dt.datetime | None = None,
           stale: bool = False) -> str:
    meta, summary = digest["meta"], digest["summary"]
    total = meta["deviceTotalBytes"]
    limit = f"of {format_bytes(total)}"
    if budget != total:
        limit += f" (budget {format_bytes(budget)})"
    phase = f" in {md_code(summary['peakPhase'])}" if summary["peakPhase"] else ""
    device = md_text(meta["deviceName"])
    if meta["deviceDisplayName"] and meta["deviceDisplayName"] != meta["deviceName"]:
        device += f" ({md_text(meta['deviceDisplayName'])})"
    text = (f"Peak **{format_bytes(summary['peakBytes'])}** {limit}{phase} · rank {meta['rank']} "
            f"of {meta['worldSize']} · {device} · {md_text(meta['targetKind'])} "
            f"{md_code(meta['targetName'])} · traced {age_text(meta['created'], now)}")
    for sub in summary.get("subcategories", ()):  # FP8 weights/scales of the parameters
        text += (f"\n\nOf which {md_text(sub['label'])}: {format_bytes(sub['atPeakBytes'])} at "
                 f"the peak, at most {format_bytes(sub['peakBytes'])}")
    if stale:
        text = ("⚠ *Stale*: the file changed since this trace; the numbers moved with their "
                "lines. Trace again to update.\n\n" + text)
    return text


def hover_markdown(a: Annotation, digest: Digest, budget: int,
                   now: _dt.datetime | None = None, stale: bool = False) -> str:
    return f"{a.body}\n\n---\n\n{footer(digest, budget, now, stale)}"


def hint_text(a: Annotation, stale: bool) -> str:
    return a.text + (" (stale)" if stale else "")
