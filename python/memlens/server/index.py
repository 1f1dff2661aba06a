"""The newest snapshot of each target, under `.memlens/<slug>/` of every workspace folder.

Snapshots are read by a helper process (memlens.snapshot.digest); the index keeps only their
digests. `refresh()` is cheap when nothing changed (a directory listing per target), so the
server calls it on a timer as well as after each trace: snapshots written by the CLI show up too.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..worker.protocol import SNAPSHOT_DIR, worker_env
from ..snapshot.digest import Digest, DigestError
GITIGNORE = "# Snapshots of Torch Memory Lens; regenerate them with \"Trace Memory\".\n*\n"


@dataclass
class SnapshotEntry:
    folder: str  # the workspace folder
    dir: str  # .memlens/<slug>
    path: str
    mtime: float
    digest: Digest | None = None
    error: str | None = None
    files: frozenset = field(default_factory=frozenset)

    @property
    def slug(self) -> str:
        return os.path.basename(self.dir)

    @property
    def created(self) -> float:
        """Seconds since the epoch (the snapshot's own time, else the file's)."""
        if self.digest:
            try:
                when = _dt.datetime.fromisoformat(self.digest["meta"]["created"])
                if when.tzinfo is None:
                    when = when.replace(tzinfo=_dt.timezone.utc)
                return when.timestamp()
            except (ValueError, KeyError):
                pass
        return self.mtime


DigestRunner = Callable[[list[str]], Awaitable[list[dict[str, Any]]]]


async def digest_in_helper(paths: list[str], timeout: float = 300.0) -> list[dict[str, Any]]:
    """Digest snapshots in a helper process (no torch there either; the server's memory and
    event loop stay free of multi-MB JSON)."""
    if not paths:
        return []
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memlens.snapshot.digest", *paths,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=worker_env(), limit=256 * 1024 * 1024)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return [{"path": p, "error": f"{p}: reading the snapshot took over {timeout:.0f} s"}
                for p in paths]
    results: dict[str, dict[str, Any]] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(d, dict) and "path" in d:
            results[d["path"]] = d
    why = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
    return [results.get(p) or {"path": p, "error": f"{p}: could not be read ({why[0]})"}
            for p in paths]


def snapshot_root(folder: str) -> str:
    return os.path.join(folder, SNAPSHOT_DIR)


def ensure_snapshot_dir(folder: str, slug: str) -> str:
    root = snapshot_root(folder)
    os.makedirs(os.path.join(root, slug), exist_ok=True)
    ignore = os.path.join(root, ".gitignore")
    if not os.path.exists(ignore):
        with open(ignore, "w") as f:
            f.write(GITIGNORE)
    return os.path.join(root, slug)


def newest_snapshot_file(directory: str) -> tuple[str, float] | None:
    best: tuple[float, str] | None = None
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = os.path.join(directory, name)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        if best is None or (mtime, name) > (best[0], os.path.basename(best[1])):
            best = (mtime, path)
    return (best[1], best[0]) if best else None


class SnapshotIndex:
    def __init__(self, runner: DigestRunner = digest_in_helper,
                 log: Callable[[str], None] = lambda message: None):
        self.runner = runner
        self.log = log
        self.entries: dict[str, SnapshotEntry] = {}  # by directory
        self._lock = asyncio.Lock()

    async def refresh(self, folders: list[str]) -> bool:
        """Pick up new, changed and removed snapshots. Returns True if anything changed."""
        async with self._lock:
            found: dict[str, tuple[str, str, float]] = {}
            for folder in folders:
                root = snapshot_root(folder)
                try:
                    subdirs = sorted(os.listdir(root))
                except OSError:
                    continue
                for sub in subdirs:
                    d = os.path.join(root, sub)
                    if sub.startswith(".") or not os.path.isdir(d):
                        continue
                    newest = newest_snapshot_file(d)
                    if newest:
                        found[d] = (folder, newest[0], newest[1])
            changed = False
            for d in list(self.entries):
                if d not in found:
                    del self.entries[d]
                    changed = True
            todo = []
            for d, (folder, path, mtime) in found.items():
                e = self.entries.get(d)
                if e is None or e.path != path or e.mtime != mtime:
                    todo.append(SnapshotEntry(folder, d, path, mtime))
            if todo:
                await self._load(todo)
                changed = True
            return changed

    async def _load(self, entries: list[SnapshotEntry]) -> None:
        results = await self.runner([e.path for e in entries])
        for e, r in zip(entries, results):
            if r.get("error"):
                e.error = str(r["error"])
                self.log(f"cannot use snapshot {e.path}: {e.error}")
            else:
                e.digest = r
                e.files = frozenset(r.get("files", ()))
            self.entries[e.dir] = e

    def add(self, path: str, digest: Digest | DigestError) -> SnapshotEntry | None:
        """A snapshot whose digest came with it (the worker's final line): known without a
        helper process reading it again; `refresh` sees it unchanged. None if it is not
        there."""
        directory = os.path.dirname(path)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return None
        e = SnapshotEntry(os.path.dirname(os.path.dirname(directory)), directory, path, mtime)
        if digest.get("error"):
            e.error = str(digest["error"])
        else:
            e.digest, e.files = digest, frozenset(digest.get("files", ()))
        self.entries[directory] = e
        return e

    def by_slug(self, folder: str, slug: str) -> SnapshotEntry | None:
        e = self.entries.get(os.path.join(snapshot_root(folder), slug))
        return e if e and e.digest else None

    def usable(self) -> list[SnapshotEntry]:
        return sorted((e for e in self.entries.values() if e.digest), key=lambda e: -e.created)

    def covering_all(self, path: str) -> list[SnapshotEntry]:
        """Every snapshot that has something to say about the file `path`, newest first."""
        return [e for e in self.usable() if path in e.files]

    def covering(self, path: str, chosen: str | None = None) -> SnapshotEntry | None:
        """The one snapshot a document of the file `path` shows: the newest of the snapshot
        folder `chosen` (Choose Trace) when that covers the file, else the newest covering
        it. The one place that decides; CodeLens, hints, hovers and the status bar follow."""
        covering = self.covering_all(path)
        for e in covering:
            if e.dir == chosen:
                return e
        return covering[0] if covering else None

    def by_path(self, snapshot_path: str) -> SnapshotEntry | None:
        for e in self.entries.values():
            if e.path == snapshot_path or os.path.realpath(e.path) == os.path.realpath(
                    snapshot_path):
                return e
        return None
