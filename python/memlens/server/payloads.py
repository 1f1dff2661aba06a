"""What the editor receives, built from the server's state: the payloads of protocol.py's custom
methods and notifications (typed with its TypedDicts), and the hovers, inlay hints, CodeLens and
diagnostics of standard LSP. Functions of what they are given: no state, nothing sent."""

from __future__ import annotations

import datetime as _dt
import os
from typing import Callable, Collection, Iterable

from lsprotocol import types as lsp
from pygls import uris

from ..units import format_bytes
from . import protocol as P
from .annotations import hint_text, hover_markdown
from .documents import DocState
from .index import SnapshotEntry
from .targets import TargetInfo
from .tracing import traceback_frames
from ..snapshot.digest import Digest

# How wide a line is in the client's units (UTF-16 code units, usually): an end of line.
LineEnd = Callable[[str], int]


# -- custom methods and notifications (protocol.py) --------------------------------------------
def snapshot_info(e: SnapshotEntry, target: TargetInfo | None, budget: int) -> P.SnapshotInfo:
    """`e`, which must have a digest, as the target `target` (None: not known) sees it."""
    m, s = e.digest["meta"], e.digest["summary"]
    return {"path": e.path, "uri": uris.from_fs_path(e.path) or "",
            "targetId": target.id if target else None, "targetName": m["targetName"],
            "kind": m["targetKind"], "created": m["created"], "peakBytes": s["peakBytes"],
            "peakPhase": s["peakPhase"], "device": m["deviceName"],
            "deviceTotalBytes": m["deviceTotalBytes"], "budgetBytes": budget,
            "fits": s.get("fits"), "headroomBytes": s.get("headroomBytes"),
            "rank": m["rank"], "worldSize": m["worldSize"]}


def fit_report(doc: dict) -> P.FitReport:
    """`memlens fit --json`'s document as the editor gets it: camelCase, a row's values in the
    axes' order, its snapshot as a full path; the frontier in the CLI's order."""
    names = [a["name"] for a in doc["space"]]
    points = os.path.join(doc["run_dir"], "points")

    def row(r: dict) -> P.FitRow:
        snapshot = r.get("snapshot")
        return {"key": r["key"], "values": [r["point"][n] for n in names], "gpus": r["gpus"],
                "verdict": r["verdict"], "source": r["source"], "reason": r["reason"],
                "by": r.get("by"), "worstRank": r.get("worst_rank"),
                "peakBytes": r.get("peak_bytes"),
                "reservedPeakBytes": r.get("reserved_peak_bytes"),
                "headroomBytes": r.get("headroom_bytes"), "ranksTraced": r.get("ranks_traced"),
                "snapshot": os.path.join(points, r["folder"], snapshot) if snapshot else None}

    c = doc["counts"]
    return {"target": doc["target"], "device": doc["device"],
            "deviceTotalBytes": doc["device_total_bytes"], "sort": doc["sort"],
            "axes": [{"name": a["name"], "values": list(a["values"]), "target": a["target"],
                      "direction": a["direction"]} for a in doc["space"]],
            "counts": {"points": c["points"], "traced": c["traced"], "resumed": c["resumed"],
                       "pruned": c["pruned"], "implied": c["implied"],
                       "notTraced": c["not traced"], "fits": c["fits"], "oom": c["oom"],
                       "errors": c["errors"]},
            "interrupted": doc["interrupted"], "frontier": [row(r) for r in doc["frontier"]],
            "excluded": [row(r) for r in doc["excluded"]], "runDir": doc["run_dir"],
            "html": doc["html"]}


def target(t: TargetInfo, tracing: bool, newest: P.SnapshotInfo | None) -> P.Target:
    out: P.Target = {
        "id": t.id, "kind": t.kind, "name": t.name, "uri": uris.from_fs_path(t.path) or "",
        "range": {"start": {"line": t.line, "character": t.start},
                  "end": {"line": t.line, "character": max(t.end, t.start)}},
        "detail": t.detail, "tracing": tracing}
    if t.symbol is not None:
        out["symbol"] = t.symbol
    if t.program is not None:
        out["program"] = t.program
    if t.module is not None:
        out["module"] = t.module
    if t.cwd is not None:
        out["cwd"] = t.cwd
    if t.world_size is not None:
        out["worldSize"] = t.world_size
    if t.kind != "model":
        out["args"] = list(t.args)
    if newest is not None:
        out["snapshot"] = newest
    return out


def annotations(state: DocState, snapshot: P.SnapshotInfo | None,
                chosen: bool = False) -> P.AnnotationsParams:
    """`memlens/annotations` of an open document; `snapshot` is its attached one's info,
    `chosen`: Choose Trace chose it."""
    stale, e = state.stale, state.entry
    anns: list[P.Annotation] = []
    if e is not None and e.digest is not None:
        for p in state.placed:
            a = p.annotation
            anns.append({"line": p.line, "kind": a.kind, "label": a.label,
                         "text": hint_text(a, stale), "bytes": a.bytes, "share": a.share,
                         "stale": stale})
    return {"uri": state.uri, "version": state.version, "stale": stale, "snapshot": snapshot,
            "chosen": chosen and snapshot is not None, "annotations": anns}


def trace_started(target_payload: P.Target, pid: int, argv: list[str]) -> P.TraceStartedParams:
    return {"targetId": target_payload["id"], "target": target_payload, "pid": pid,
            "command": argv}


def server_info(pid: int, version: str, python: str, torch_imported: bool,
                tracing: Iterable[tuple[str, int]]) -> P.ServerInfo:
    """`tracing`: (target id, worker pid) of each trace running."""
    return {"pid": pid, "version": version, "python": python, "torchImported": torch_imported,
            "tracing": [{"targetId": tid, "pid": wpid} for tid, wpid in tracing]}


# -- standard LSP --------------------------------------------------------------------------------
def hover(state: DocState, line: int, budget: int, now: _dt.datetime,
          line_end: LineEnd) -> lsp.Hover | None:
    """The hover of the annotation at `line` of an open document, if it has one."""
    p = state.by_line.get(line)
    if p is None or state.entry is None:
        return None
    md = hover_markdown(p.annotation, state.entry.digest, budget, now, state.stale)
    end = line_end(state.line_text(p.line))
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=md),
                     range=lsp.Range(lsp.Position(p.line, 0), lsp.Position(p.line, end)))


def inlay_hints(state: DocState, first: int, last: int, line_end: LineEnd
                ) -> list[lsp.InlayHint]:
    """The hints at the ends of lines `first`..`last` (0-based, inclusive)."""
    stale = state.stale
    out = []
    for p in state.placed:
        if first <= p.line <= last and p.line < len(state.lines):
            end = line_end(state.line_text(p.line))
            out.append(lsp.InlayHint(position=lsp.Position(p.line, end),
                                     label=hint_text(p.annotation, stale), padding_left=True))
    return out


def code_lenses(targets: Iterable[TargetInfo], running: Collection[str],
                newest: Callable[[TargetInfo], SnapshotEntry | None], device: str | None,
                shown: SnapshotEntry | None = None) -> list[lsp.CodeLens]:
    """Per target: trace it (or cancel its running trace); then the one snapshot the document
    shows (`shown`; None: none), as its target's "Open Report (peak …)", or on the first
    target when none of them is its target; a target with another snapshot offers to show
    that one instead (no number: every number of an editor comes from `shown`). A document
    no trace covers (launch.json, a shell script) opens each target's newest."""
    out = []
    targets = list(targets)
    owners = [t for t in targets if shown is not None and _same(newest(t), shown)]
    for i, t in enumerate(targets):
        rng = lsp.Range(lsp.Position(t.line, t.start), lsp.Position(t.line, t.end))
        arg = {"targetId": t.id}
        if t.id in running:
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(
                title="Tracing… (cancel)", command=P.CMD_CANCEL_TRACE, arguments=[arg],
                tooltip="Stop this trace")))
        else:
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(
                title="Trace Memory", command=P.CMD_TRACE, arguments=[arg],
                tooltip=f"Estimate the memory of one training step of {t.name}"
                        + (f" on {device}" if device else ""))))
        e = newest(t)
        if shown is not None and (t in owners or (not owners and i == 0)):
            peak = format_bytes(shown.digest["summary"]["peakBytes"])
            meta = shown.digest["meta"]
            title = (f"Open Report (peak {peak})" if t in owners else
                     f"Showing {meta['targetName']} (peak {peak})")
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(
                title=title, command=P.CMD_OPEN_REPORT,
                arguments=[{"targetId": t.id, "snapshot": shown.path}],
                tooltip=f"The trace this editor shows: {meta['targetName']} on "
                        f"{meta['deviceName']}, {meta['created']}")))
        elif e is not None and e.digest is not None and shown is None:
            # No trace covers this document (a launch.json, a shell script): each target
            # opens its own, as no number of the editor can disagree with it.
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(
                title=f"Open Report (peak {format_bytes(e.digest['summary']['peakBytes'])})",
                command=P.CMD_OPEN_REPORT, arguments=[{"targetId": t.id, "snapshot": e.path}],
                tooltip=f"The newest snapshot of {t.name}")))
        if e is not None and e.digest is not None and shown is not None and t not in owners:
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(
                title="Show Its Trace", command=P.CMD_CHOOSE_TRACE,
                arguments=[{"snapshot": e.path}],
                tooltip=f"Annotate this editor with the newest trace of {t.name}")))
    return out


def _same(a: SnapshotEntry | None, b: SnapshotEntry) -> bool:
    return a is not None and a.dir == b.dir


def _line_range(lines: list[str], line0: int) -> lsp.Range:
    text = lines[line0] if 0 <= line0 < len(lines) else ""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if end <= start:
        start, end = 0, max(end, 0)
    return lsp.Range(lsp.Position(max(line0, 0), start), lsp.Position(max(line0, 0), end))


def target_range(t: TargetInfo) -> lsp.Range:
    return lsp.Range(lsp.Position(t.line, t.start), lsp.Position(t.line, max(t.end, t.start)))


def budget_diagnostic(t: TargetInfo, digest: Digest, budget: int) -> lsp.Diagnostic | None:
    """A warning on a target whose peak exceeds the budget."""
    meta, summary = digest["meta"], digest["summary"]
    peak = summary["peakBytes"]
    if peak <= budget:
        return None
    where = f" in {summary['peakPhase']}" if summary["peakPhase"] else ""
    return lsp.Diagnostic(
        range=target_range(t), severity=lsp.DiagnosticSeverity.Warning,
        source=P.DIAGNOSTIC_SOURCE, code="over-budget",
        message=(f"Peak memory {format_bytes(peak)} exceeds the budget of {format_bytes(budget)} "
                 f"by {format_bytes(peak - budget)} ({meta['deviceName']}, rank {meta['rank']} "
                 f"of {meta['worldSize']}{where})."))


def error_diagnostic(t: TargetInfo, error: P.TraceError,
                     read_lines: Callable[[str], list[str]]) -> tuple[str, lsp.Diagnostic]:
    """(uri, diagnostic) for a failed trace: at the user's frame when the error names one,
    else on the target; the traceback's frames as related information."""
    file, line = error.get("file"), int(error.get("line") or 0)
    if file and os.path.isfile(file):
        uri = uris.from_fs_path(os.path.abspath(file)) or ""
        rng = _line_range(read_lines(os.path.abspath(file)), line - 1) if line > 0 else \
            lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0))
    else:
        uri = uris.from_fs_path(t.path) or ""
        rng = target_range(t)
    related = []
    tb = error.get("traceback") or ""
    for f, ln, func, code in traceback_frames(tb):
        if not os.path.isfile(f):
            continue
        furi = uris.from_fs_path(os.path.abspath(f)) or ""
        related.append(lsp.DiagnosticRelatedInformation(
            location=lsp.Location(furi, _line_range(read_lines(os.path.abspath(f)), ln - 1)),
            message=f"{func}: {code}" if code else (func or f"line {ln}")))
    message = str(error.get("message") or "the trace failed")
    if tb and not related:  # no frame to point at: keep the text itself
        message += "\n" + tb.strip()[-2000:]
    if uri != uris.from_fs_path(t.path):
        message += f" (tracing {t.name})"
    return uri, lsp.Diagnostic(
        range=rng, severity=lsp.DiagnosticSeverity.Error, source=P.DIAGNOSTIC_SOURCE,
        code=str(error.get("kind") or "trace-failed"), message=message,
        related_information=related or None)
