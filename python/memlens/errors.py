"""Errors meant for the user: one clear message, a place when there is one, no traceback."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Location:
    file: str
    line: int
    name: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class MemlensError(Exception):
    """An error caused by the input (script, recipe, snapshot, flags), not by memlens itself."""

    def __init__(self, message: str, location: Location | None = None, details: str = ""):
        super().__init__(message)
        self.message = message
        self.location = location
        self.details = details  # e.g. the user's traceback, shown after the message

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.message}"


class ScriptError(MemlensError):
    """The traced user code raised. `details` carries the traceback of user frames."""


class DataDependentError(MemlensError):
    """A value that only a real run knows decides what happens next."""


class SnapshotError(MemlensError):
    """A snapshot file is missing, truncated, of another format or version, or invalid."""


class LayerReplayAbandoned(Exception):
    """A replayed block turned out not to be what a full trace books, or the script failed
    after a replay (engine/layer_replay.py): the trace is run again without layer replay."""

    # Set in the process that traces again in full: why the replay was abandoned.
    ENV = "MEMLENS_LAYER_REPLAY_ABANDONED"


class StopTracing(BaseException):
    """Raised into user code after the requested iterations; BaseException so `except Exception` in
    the script does not swallow it."""
