"""Diagnostics: a warning on a target whose peak exceeds the budget, and an error at the user's
frame when a trace fails (its traceback as related information). Kept per key (one budget and
one error per target) and published per document."""

from __future__ import annotations

import os
from typing import Any, Callable

from lsprotocol import types as lsp
from pygls import uris

from ..units import format_bytes
from .protocol import DIAGNOSTIC_SOURCE
from .targets import TargetInfo
from .tracing import traceback_frames


def _line_range(lines: list[str], line0: int) -> lsp.Range:
    text = lines[line0] if 0 <= line0 < len(lines) else ""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if end <= start:
        start, end = 0, max(end, 0)
    return lsp.Range(lsp.Position(max(line0, 0), start), lsp.Position(max(line0, 0), end))


def target_range(t: TargetInfo) -> lsp.Range:
    return lsp.Range(lsp.Position(t.line, t.start), lsp.Position(t.line, max(t.end, t.start)))


def budget_diagnostic(t: TargetInfo, digest: dict[str, Any], budget: int
                      ) -> lsp.Diagnostic | None:
    meta, summary = digest["meta"], digest["summary"]
    peak = summary["peakBytes"]
    if peak <= budget:
        return None
    where = f" in {summary['peakPhase']}" if summary["peakPhase"] else ""
    return lsp.Diagnostic(
        range=target_range(t), severity=lsp.DiagnosticSeverity.Warning,
        source=DIAGNOSTIC_SOURCE, code="over-budget",
        message=(f"Peak memory {format_bytes(peak)} exceeds the budget of {format_bytes(budget)} "
                 f"by {format_bytes(peak - budget)} ({meta['deviceName']}, rank {meta['rank']} "
                 f"of {meta['worldSize']}{where})."))


def error_diagnostic(t: TargetInfo, error: dict[str, Any],
                     read_lines: Callable[[str], list[str]]) -> tuple[str, lsp.Diagnostic]:
    """(uri, diagnostic) for a failed trace: at the user's frame when the error names one,
    else on the target."""
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
        range=rng, severity=lsp.DiagnosticSeverity.Error, source=DIAGNOSTIC_SOURCE,
        code=str(error.get("kind") or "trace-failed"), message=message,
        related_information=related or None)


class DiagnosticStore:
    """Diagnostics by key; `publish(uri, diagnostics)` is called for each URI that changed."""

    def __init__(self, publish: Callable[[str, list[lsp.Diagnostic]], None]):
        self.publish = publish
        self._by_key: dict[str, tuple[str, lsp.Diagnostic]] = {}

    def set(self, key: str, uri: str | None, diag: lsp.Diagnostic | None) -> None:
        old = self._by_key.pop(key, None)
        if diag is not None and uri:
            self._by_key[key] = (uri, diag)
        touched = {u for u in (old[0] if old else None, uri if diag is not None else None) if u}
        for u in touched:
            self.publish(u, self.for_uri(u))

    def clear(self, key: str) -> None:
        self.set(key, None, None)

    def for_uri(self, uri: str) -> list[lsp.Diagnostic]:
        return [d for u, d in self._by_key.values() if u == uri]

    def keys(self) -> list[str]:
        return list(self._by_key)
