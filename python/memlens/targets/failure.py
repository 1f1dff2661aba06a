"""Turn an exception raised by user code into a ScriptError that points at the user's line."""

from __future__ import annotations

import traceback

from ..errors import Location, MemlensError, ScriptError
from ..engine.stacks import StackTable

_stacks: StackTable | None = None


def _is_user_file(path: str) -> bool:
    global _stacks
    if _stacks is None:
        _stacks = StackTable()
    return _stacks.is_user_path(path)


def user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(exc.__traceback__) if _is_user_file(f.filename)]


def script_error(exc: BaseException, what: str) -> MemlensError:
    """`what` names the workload, e.g. "train.py"."""
    if isinstance(exc, MemlensError):
        return exc
    frames = user_frames(exc)
    # Point at the user's own code (their script or model) before a third-party library's.
    own = [f for f in frames if not _stacks.is_site_package(f.filename)] or frames
    loc = Location(own[-1].filename, own[-1].lineno or 0, own[-1].name) if own else None
    text = "".join(traceback.format_list(frames)) + "".join(
        traceback.format_exception_only(type(exc), exc))
    message = f"{what} raised {type(exc).__name__}: {exc}".strip()
    return ScriptError(message.splitlines()[0][:500] if message else type(exc).__name__, loc, text)
