"""A worker process and every process it starts, ended together; waiting on the process itself,
not on its pipes.

A user's script may start processes that leave the worker's process group
(`Popen(..., start_new_session=True)`, a double fork and setsid), so a group kill misses them, and
children that inherit the worker's stdout/stderr keep its pipes open after it exits. Hence:

- the worker is a child subreaper (Linux, prctl PR_SET_CHILD_SUBREAPER, kept across exec): what
  its descendants orphan is re-parented to it instead of init, so that while it lives, walking
  /proc by parent pid from it finds every process of the trace, whatever session it moved to;
- every worker carries a mark in its environment (MEMLENS_WORKER_MARK, nested for workers of
  workers), which its children inherit: after the worker has exited, what is left of its tree is
  found by that mark;
- the worker ends its own tree when it exits (`end_children`, memlens/__main__.py); its parent ends
  the tree on a time limit or a cancel (`kill_tree`, from the worker down while it lives), and
  whatever still carries the worker's mark once it has exited (a worker killed outright cannot
  sweep).

Where there is no /proc (not Linux) only the process group is killed. Its users: the language
server's trace worker (server/worker.py), the rank workers of `--ranks all`
(distributed/workers.py) and the run of a launch script (targets/shell_record.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

try:
    import resource
except ImportError:  # not POSIX
    resource = None  # type: ignore[assignment]

MARK = "MEMLENS_WORKER_MARK"
PIPE_GRACE_S = 2.0  # after the worker exited: for its output still in the pipes
_KILL_ROUNDS = 50  # a tree that forks while it is killed: its new children are found next round

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _libc_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def become_subreaper() -> bool:
    """Make this process adopt what its descendants orphan (Linux); False where it cannot."""
    return _PRCTL is not None and _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


# -- the process table ---------------------------------------------------------------------
def _table() -> dict[int, int]:
    """pid -> parent pid of every live process (zombies left out: they are dead already)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] not in (b"Z", b"X"):
            out[int(name)] = int(fields[1])
    return out


def descendants(pid: int) -> list[int]:
    """The live processes whose chain of parents reaches `pid` (parents before children)."""
    children: dict[int, list[int]] = {}
    for child, parent in _table().items():
        children.setdefault(parent, []).append(child)
    out, todo = [], list(children.get(pid, ()))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pid: int) -> None:
    """The process group led by `pid` (where there are groups)."""
    if os.name != "posix":
        _kill(pid, signal.SIGTERM)
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(pid: int) -> None:
    """Kill every descendant of `pid` (not `pid`), until none is left. With `pid` a subreaper,
    the children of a killed process are re-parented to it and found in the next round."""
    for _ in range(_KILL_ROUNDS):
        found = descendants(pid)
        if not found:
            return
        for p in found:
            _kill(p, signal.SIGSTOP)  # no more forks from this round's processes
        for p in found:
            _kill(p)


def kill_tree(pid: int) -> None:
    """Kill a live process, its group and its descendants, stopped first so that it starts no
    more of them meanwhile."""
    _kill(pid, signal.SIGSTOP)
    kill_descendants(pid)
    kill_group(pid)
    _kill(pid)


def _mark_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    key = MARK.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("ascii", "replace")
    return None


def kill_marked(mark: str) -> None:
    """Kill the processes that carry `mark` (or a mark nested in it), and their descendants:
    what a worker's tree left behind after the worker exited."""
    me = os.getpid()
    for pid in _table():
        if pid == me:
            continue
        found = _mark_of(pid)
        if found is not None and (found == mark or found.startswith(mark + "/")):
            _kill(pid, signal.SIGSTOP)
            kill_descendants(pid)
            _kill(pid)


def adopt_orphans() -> None:
    """In a worker (a process with a mark): adopt what its descendants orphan, so that
    `end_children` finds them (the parent made it a subreaper already; a worker started by
    another parent may not be)."""
    if MARK in os.environ:
        become_subreaper()


def end_children() -> None:
    """In a worker, as it exits: kill whatever is left of its tree."""
    if MARK in os.environ:
        kill_descendants(os.getpid())


# -- one worker process --------------------------------------------------------------------
def _preexec(memory_limit: int | None, parent: int | None = None
             ) -> Callable[[], None] | None:
    """What the child does between fork and exec: die with the thread that started it (so a
    parent killed outright leaves no worker behind), adopt its orphans, take the memory limit.
    `parent`: the pid that forked the child (by default the caller, which forks next): a
    parent killed before the child asked for its death signal sends none, so the child checks
    it still has that parent once it has asked. No imports, no locks here."""
    parent = os.getpid() if parent is None else parent
    getppid, kill, me = os.getppid, os.kill, os.getpid
    setrlimit = soft = hard = which = None
    if memory_limit is not None and resource is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
        setrlimit, which = resource.setrlimit, resource.RLIMIT_AS
    prctl = _PRCTL
    if setrlimit is None and prctl is None:
        return None

    def apply() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if getppid() != parent:  # it died first: what its death signal would have done
                kill(me(), signal.SIGKILL)
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        if setrlimit is not None:
            try:
                setrlimit(which, (soft, hard))
            except (ValueError, OSError):
                pass

    return apply


@dataclass
class Ended:
    returncode: int
    stdout: str
    timed_out: bool
    duration_s: float


class WorkerProcess:
    """A worker process whose stdout is collected and whose stderr lines go to `on_stderr_line`
    (from a reader thread). `wait()` returns when the process exits, then ends what it left
    running; `stop()` (any thread) ends it all now."""

    def __init__(self, argv: list[str], cwd: str | None, env: dict[str, str],
                 memory_limit: int | None = None,
                 on_stderr_line: Callable[[str], None] = lambda line: None):
        self.argv, self.cwd, self.memory_limit = argv, cwd, memory_limit
        self.env = dict(env)
        parent_mark = os.environ.get(MARK)
        self.mark = self.env[MARK] = (parent_mark + "/" if parent_mark else "") + \
            uuid.uuid4().hex[:12]
        self.on_stderr_line = on_stderr_line
        self.proc: subprocess.Popen | None = None
        self._stdout: list[bytes] = []
        self._readers: list[threading.Thread] = []
        self._stopped = False
        self._started = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Start the process (OSError if it cannot be)."""
        self._started = time.monotonic()
        self.proc = self._spawn()
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._readers:
            t.start()
        if self._stopped:
            self.stop()

    def _spawn(self):
        """The process (a Popen, or what stands for one: worker/warm.py's forked child)."""
        return subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=os.name == "posix",
            preexec_fn=_preexec(self.memory_limit))

    def _read_stdout(self) -> None:
        fd = self.proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self._stdout.append(chunk)

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:
            self.on_stderr_line(raw.decode("utf-8", "replace").rstrip("\r\n"))

    def stop(self) -> None:
        """End the worker and everything it started (idempotent; a no-op once it has ended)."""
        self._stopped = True
        if self.proc is not None and self.proc.returncode is None:
            kill_tree(self.proc.pid)

    def wait(self, time_limit: float | None = None) -> Ended:
        """Wait for the process to exit (or the time limit: then kill it), end what it left,
        and return with the output read within PIPE_GRACE_S of its exit."""
        assert self.proc is not None
        timed_out = False
        try:
            returncode = self.proc.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(self.proc.pid)
            returncode = self.proc.wait()
        self._end_leftovers()
        deadline = time.monotonic() + PIPE_GRACE_S
        for t in self._readers:
            t.join(max(0.0, deadline - time.monotonic()))
        if not any(t.is_alive() for t in self._readers):
            self.proc.stdout.close()
            self.proc.stderr.close()
        # else something out of reach (no mark, no group) holds the pipes: leave the readers.
        stdout = b"".join(self._stdout).decode("utf-8", "replace")
        return Ended(returncode, stdout, timed_out, time.monotonic() - self._started)

    def _end_leftovers(self) -> None:
        """The worker has exited: its group (children that stayed in it) and whatever carries
        its mark (children that left the group; re-parented, the tree walk cannot reach them)."""
        kill_group(self.proc.pid)
        kill_marked(self.mark)
