"""What a warm process watches to know it is out of date (cli/fork_server.py sends the stamps
once it has imported everything; worker/warm.py's ForkServer.stale compares them before each
fork): memlens' source files by modification time, memlens' folders by the names of the
sources and folders in them, torch's install and site-packages folders by modification time
(pip writes there).

A folder of memlens' is not stamped by its own modification time: Python writes its bytecode
cache into an editable install's folders (`__pycache__`, made as modules are first imported),
which changes the folder's time but not what it holds. Every warm process looked out of date
then, and one replaced while a trace forked from it ran took that trace with it.
"""

from __future__ import annotations

import os

_SOURCES = (".py", ".cpp")
_CACHE = "__pycache__"


def watched(package: str, folders: list[str]) -> list[list]:
    """[path, stamp] for `package`'s folders and sources and for `folders` (their mtimes)."""
    stamps = [[folder, os.stat(folder).st_mtime_ns] for folder in folders]
    for folder, subfolders, names in os.walk(package):
        subfolders[:] = [s for s in subfolders if s != _CACHE]
        stamps.append([folder, _contents(folder)])
        sources = [os.path.join(folder, n) for n in names if n.endswith(_SOURCES)]
        stamps.extend([path, os.stat(path).st_mtime_ns] for path in sources)
    return stamps


def changed(path: str, stamp) -> bool:
    """Whether `path` no longer has the stamp `watched` gave it (gone counts as changed)."""
    try:
        return (_contents(path) if isinstance(stamp, list) else os.stat(path).st_mtime_ns) \
            != stamp
    except OSError:
        return True


def _contents(folder: str) -> list[str]:
    """The sources and folders in `folder` (not the bytecode cache), sorted."""
    with os.scandir(folder) as entries:  # a folder's entries say whether they are folders
        return sorted(e.name for e in entries if e.name != _CACHE and (
            e.name.endswith(_SOURCES) or e.is_dir()))
