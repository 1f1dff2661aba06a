"""Turn an exception raised by user code into a ScriptError that points at the user's line."""

from __future__ import annotations

import os
import traceback

from ..errors import Location, MemlensError, ScriptError
from ..stacks import StackTable

_stacks: StackTable | None = None


def _is_user_file(path: str) -> bool:
    global _stacks
    if _stacks is None:
        _stacks = StackTable()
    return not (path.startswith("<") or os.path.abspath(path).startswith(_stacks._roots))


def user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(exc.__traceback__) if _is_user_file(f.filename)]


def script_error(exc: BaseException, what: str) -> MemlensError:
    """`what` names the workload, e.g. "train.py"."""
    if isinstance(exc, MemlensError):
        return exc
    frames = user_frames(exc)
    loc = Location(frames[-1].filename, frames[-1].lineno or 0, frames[-1].name) if frames else None
    text = "".join(traceback.format_list(frames)) + "".join(
        traceback.format_exception_only(type(exc), exc))
    message = f"{what} raised {type(exc).__name__}: {exc}".strip()
    return ScriptError(message.splitlines()[0][:500] if message else type(exc).__name__, loc, text)
