"""Writing a report or snapshot file where the user said, without harming what is there.

A write goes to a temporary file beside the target and is renamed over it, so a reader never
sees half a file. Before that, the target is checked: a symbolic link is followed (the file it
points to is written, the link stays), anything that is not a regular file or a new path (a
device node such as /dev/null, a directory, a FIFO) is refused, and a snapshot is never
written over a file that is not a memlens snapshot (`--snapshot train.py` must not replace the
script). Every failure is an OutputError naming the path and the cause.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

from ..errors import MemlensError

SNAPSHOT_MARK = b'"memlens.snapshot"'  # the `format` value every snapshot starts with


class OutputError(MemlensError):
    """An output file could not be written; nothing of the trace is lost before it."""


def _target(path: Path, what: str) -> Path:
    """The path to write: a symlink's target; refuses what is not a regular file."""
    resolved = Path(os.path.realpath(path))
    try:
        st = os.stat(resolved)
    except FileNotFoundError:
        return resolved
    except OSError as e:
        raise OutputError(f"cannot write the {what} {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise OutputError(f"cannot write the {what} {path}: it is {kind}; give a file path")
    return resolved


def _is_snapshot(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(256)
    return not head.strip() or SNAPSHOT_MARK in head


def write_atomically(path: str | os.PathLike, write: Callable, what: str,
                     only_over_snapshots: bool = False, binary: bool = False) -> Path:
    """Write through `write(file)` (text mode, UTF-8, unless `binary`) into `path`; returns the
    path given. `only_over_snapshots`: refuse to replace an existing file that is not one."""
    given = Path(path)
    target = _target(given, what)
    try:
        if only_over_snapshots and target.exists() and not _is_snapshot(target):
            raise OutputError(f"cannot write the {what} {given}: it exists and is not a memlens "
                              "snapshot; give another path")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
    except OSError as e:
        raise OutputError(f"cannot write the {what} {given}: {e.strerror or e}") from None
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it 0600)
        os.replace(tmp, target)
    except OSError as e:
        _remove(tmp)
        raise OutputError(f"cannot write the {what} {given}: {e.strerror or e}") from None
    except BaseException:
        _remove(tmp)
        raise
    return given


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
