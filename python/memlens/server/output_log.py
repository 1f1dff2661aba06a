"""What a traced script prints, on its way to the client. A script may print 100 MB; as
`window/logMessage` notifications that is millions of messages the editor has to store and
draw. Every line goes to a log file; the client gets at most LINES_PER_SECOND lines a second
and BYTES_PER_TRACE bytes a trace, then one line saying where the full log is."""

from __future__ import annotations

import os
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import TextIO

from .tracing import RunningTrace

LINES_PER_SECOND = 200
BYTES_PER_TRACE = 1_000_000
MAX_LINE_CHARS = 2_000  # one line to the client; the file keeps all of it


def log_path_for(folder: str, slug: str, snapshot: str) -> str:
    """`.memlens/logs/<target slug>-<the snapshot's stamp>.log` in the target's folder, or in
    the temp directory where the folder is not writable."""
    stamp = os.path.splitext(os.path.basename(snapshot))[0] or "trace"
    name = f"{slug}-{stamp}.log"
    logs = os.path.join(folder, ".memlens", "logs")
    try:
        os.makedirs(logs, exist_ok=True)
        return os.path.join(logs, name)
    except OSError:
        return os.path.join(tempfile.gettempdir(), f"memlens-{name}")


class TraceOutputLog:
    """One trace's output: `write(line)` for each line the worker prints."""

    def __init__(self, path: str, send: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic,
                 lines_per_second: int = LINES_PER_SECOND, byte_budget: int = BYTES_PER_TRACE):
        self.path, self.send, self.clock = path, send, clock
        self.lines_per_second, self.byte_budget = lines_per_second, byte_budget
        self.sent_bytes = 0
        self.truncated = False
        self._second, self._sent_this_second = -1, 0
        self._file: TextIO | None = None
        self._file_failed = False

    def write(self, line: str) -> None:
        self._to_file(line)
        if self.truncated:
            return
        second = int(self.clock())
        if second != self._second:
            self._second, self._sent_this_second = second, 0
        if self._sent_this_second >= self.lines_per_second:
            if self._sent_this_second == self.lines_per_second:  # once a second, at once
                self._sent_this_second += 1
                self._send(f"… more lines this second not shown; full log at {self.path}")
            return
        self._sent_this_second += 1
        self._send(line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _send(self, text: str) -> None:
        cost = len(text.encode("utf-8", "replace")) + 1
        if self.sent_bytes + cost > self.byte_budget:
            self.truncated = True
            self.send(f"… output truncated; full log at {self.path}")
            return
        self.sent_bytes += cost
        self.send(text)

    def _to_file(self, line: str) -> None:
        if self._file_failed:
            return
        try:
            if self._file is None:  # line-buffered: the file is whole whenever a user opens it
                self._file = open(self.path, "w", encoding="utf-8", errors="replace", buffering=1)
            self._file.write(line + "\n")
        except OSError:
            self._file_failed = True  # the client still gets what the limits allow


def output_log_of(run: RunningTrace, send: Callable[[str], None]) -> TraceOutputLog:
    """The output log of a running trace, made at its first line; the file closes when the run
    is gone."""
    log = run.__dict__.get("_output_log")
    if log is None:
        t = run.request.target
        log = TraceOutputLog(log_path_for(t.folder or os.path.dirname(t.path), t.slug,
                                          run.snapshot), send)
        run.__dict__["_output_log"] = log
        weakref.finalize(run, log.close)
    return log
