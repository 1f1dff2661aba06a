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


def script_error(exc: BaseException, what: str,
                 made_up: list[tuple[str, int, str, str, object]] = ()) -> MemlensError:
    """`what` names the workload, e.g. "train.py"; `made_up`: the values the trace answered
    where code read a tensor's value, as (file, line, function, read, value)."""
    if isinstance(exc, MemlensError):
        return exc
    frames = user_frames(exc)
    # Point at the user's own code (their script or model) before a third-party library's.
    own = [f for f in frames if not _stacks.is_site_package(f.filename)] or frames
    loc = Location(own[-1].filename, own[-1].lineno or 0, own[-1].name) if own else None
    text = "".join(traceback.format_list(frames)) + "".join(
        traceback.format_exception_only(type(exc), exc))
    message = f"{what} raised {type(exc).__name__}: {exc}".strip()
    message = message.splitlines()[0][:500] if message else type(exc).__name__
    return ScriptError(message + _made_up_cause(exc, made_up), loc, text)


def _made_up_cause(exc: BaseException, made_up) -> str:
    """Where the user-side function that raised (or its caller) read a tensor's value, or
    received objects another rank sent, the trace answered a made-up one: the likeliest cause,
    said with the error (a model that computes shapes or loop counts from token ids or image
    grids, as Qwen2-VL does, fails so; so does FSDP's optimizer-state save on a rank other than
    the one that broadcasts its keys). Functions further up are not counted: a training loop
    reads its loss, and fails for other reasons."""
    on_stack = {(f.filename, f.name) for f in user_frames(exc)[-2:]}
    read = [m for m in made_up if (m[0], m[2]) in on_stack]
    if not read:
        return ""
    file, line, _, op, value = read[-1]
    if op.startswith("objects broadcast by rank "):
        sender = op.rsplit(" ", 1)[1]
        return (f" (after {file}:{line} received the {op}, which a trace of this rank does not "
                f"have: it answered {value!r}; trace rank {sender} instead, --rank {sender}: "
                "the objects it sends are its own)")
    return (f" (after {file}:{line} read a tensor's value ({op}), which a trace does not have: "
            f"it answered {value!r}; code whose shapes or control flow follow tensor values "
            "cannot be traced with made-up ones)")


class StderrTail:
    """sys.stderr, remembering the end of what is written through it: a script that exits with
    a status (argparse's `prog: error: ...` and exit 2) has said why there, last."""

    KEEP = 4000  # characters

    def __init__(self, stream) -> None:
        self._stream = stream
        self._tail = ""

    def write(self, text: str) -> int:
        self._tail = (self._tail + text)[-self.KEEP:]
        return self._stream.write(text)

    def last_line(self) -> str:
        """The last thing said: the last line, or the whole of a boxed message that ends the
        output (rich's panels, which tyro's and typer's argument errors are printed in)."""
        return last_said(self._tail)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


_FRAME = "╭╮╰╯│─━┃┏┓┗┛═║╔╗╚╝ "


def last_said(text: str) -> str:
    """The last non-empty line of `text`; where it closes a box (`╰────╯`), the box's lines
    and title, unframed, joined by spaces."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if not lines[-1].startswith(("╰", "┗", "╚")):
        return lines[-1]
    top = next((k for k in range(len(lines) - 2, -1, -1)
                if lines[k].startswith(("╭", "┏", "╔"))), None)
    if top is None:
        return lines[-1]
    title = lines[top].strip(_FRAME)
    said = [line.strip(_FRAME) for line in lines[top + 1:-1]]
    said = [line for line in said if line]
    return (f"{title}: " if title else "") + " ".join(said)


def exit_error(code, what: str, said: str) -> MemlensError:
    """A script's `sys.exit(code)`: the status and what the script said last on stderr."""
    if isinstance(code, str):  # sys.exit("message")
        return ScriptError(f"{what} exited: {code[:500]}")
    text = f"{what} exited with status {code}"
    return ScriptError(f"{text}: {said[:500]}" if said else text)
