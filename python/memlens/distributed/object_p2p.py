"""Objects one simulated rank sends another (`send_object_list` / `recv_object_list`).

A pipeline stage that is not told its input shapes learns them at the first step from the
previous stage (`recv_object_list`), and sends its own outputs' shapes on. A simulated rank has
no other process to receive from, so each rank's sends are recorded in a folder the whole job
shares, and a receive reads the record of the sender's send:

- `<folder>/S-to-D-N.pkl`: the N-th objects rank S sent rank D (pickled by the patch, tensors as
  their metadata: patches/torch_object_p2p.py);
- `<folder>/rank-S.pid`: rank S is being traced by that process (wait for its sends);
- `<folder>/rank-S.done`: rank S's trace ended: what it did not send, it never sends;
- `<folder>/want-S-to-D-N`: rank D waits for that message (a paused helper of S goes on).

When the record is not there and no live process traces the sender, the receiver traces the
sender itself, in a helper worker (the same job, `--rank S`). After each send the helper pauses
until some rank wants a message of S that is not recorded yet, and ends with the rank that
started it: the stages of an interleaved schedule exchange several messages each way, from one
helper. The helper's own receives do the same, so the chain goes back to stage 0. With
`--ranks all` the parent hands every worker one folder (MEMLENS_OBJECTS_DIR), so the ranks it
traces anyway leave their records and none is traced twice.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Callable

from ..errors import MemlensError
from ..worker.process_tree import WorkerProcess
from ..worker.protocol import final_json, progress_record, worker_env

ENV_FOLDER = "MEMLENS_OBJECTS_DIR"
ENV_HELPER_OF = "MEMLENS_OBJECTS_HELPER_OF"  # the pid that started this helper trace
HELPER_NOTICE = "memlens: tracing rank"  # the line each helper trace prints (tests count them)
POLL_S = 0.05
LOG_TAIL = 20

_peer_argv: Callable[[int], list[str]] | None = None
_peer_cwd: str | None = None


def configure(peer_argv: Callable[[int], list[str]] | None) -> None:
    """How to trace another rank of this job: `peer_argv(rank)` are `memlens run` arguments
    (the CLI sets it; without it a rank cannot trace a sender and says so)."""
    global _peer_argv, _peer_cwd
    _peer_argv = peer_argv
    _peer_cwd = os.getcwd()  # the script may change directory before it receives


class _Helper:
    """A helper worker tracing one sender, and the tail of its log."""

    def __init__(self, process: WorkerProcess) -> None:
        self.process = process
        self.tail: deque[str] = deque(maxlen=LOG_TAIL)

    def ended(self) -> bool:
        return self.process.proc is not None and self.process.proc.poll() is not None


class ObjectExchange:
    """The simulated rank's side of the record folder."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        given = os.environ.get(ENV_FOLDER)
        self._own_folder = not given
        self.folder = Path(given) if given else None
        self._sent: dict[int, int] = defaultdict(int)
        self._received: dict[int, int] = defaultdict(int)
        helper_of = os.environ.get(ENV_HELPER_OF)
        self._helper_of = int(helper_of) if helper_of else None
        self._helpers: dict[int, _Helper] = {}
        if self.folder is not None:
            self._claim()

    # -- this rank's side ------------------------------------------------------------------
    def send(self, dst: int, payload: bytes) -> None:
        n = self._sent[dst]
        self._sent[dst] += 1
        _write(self._folder() / _record(self.rank, dst, n), payload)
        if self._helper_of is not None:
            self._pause()

    def receive(self, src: int, where: str) -> bytes:
        """The payload of src's next send to this rank; `where` (file:line of the receive)
        goes into the errors."""
        n = self._received[src]
        path = self._folder() / _record(src, self.rank, n)
        want = self._folder() / f"want-{src}-to-{self.rank}-{n}"
        while not path.exists():
            helper = self._helpers.get(src)
            ended = (self._folder() / f"rank-{src}.done").exists() or (
                helper is not None and helper.ended())
            if ended and not path.exists():  # (it may have sent just before it ended)
                self._never_sent(src, n, where, helper)
            if helper is None and not _alive(self._claimant(src)):
                self._helpers[src] = self._start_helper(src, where)
            if not want.exists():
                _write(want, b"")
            time.sleep(POLL_S)
        self._received[src] += 1
        return path.read_bytes()

    def close(self) -> None:
        for helper in self._helpers.values():
            helper.process.stop()
        for helper in self._helpers.values():
            if not helper.ended():
                helper.process.wait()
        if self.folder is None:
            return
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        elif self._helper_of is None:  # a helper is stopped: it never says it is done
            (self.folder / f"rank-{self.rank}.done").touch()

    # -- a helper's pause ------------------------------------------------------------------
    def _pause(self) -> None:
        """Wait until a rank wants a message of this one that is not recorded yet; end when
        the rank that started this helper has ended (nobody else will want more)."""
        prefix = f"want-{self.rank}-to-"
        while True:
            for want in self._folder().glob(prefix + "*"):
                dst, _, n = want.name[len(prefix):].partition("-")
                if not (self._folder() / _record(self.rank, int(dst), int(n))).exists():
                    return
            if not _alive(self._helper_of):
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            time.sleep(POLL_S)

    # -- the folder ------------------------------------------------------------------------
    def _folder(self) -> Path:
        if self.folder is None:  # a rank traced alone: a folder for its helpers
            self.folder = Path(tempfile.mkdtemp(prefix="memlens-objects-"))
            self._claim()
        return self.folder

    def _claim(self) -> None:
        _write(self.folder / f"rank-{self.rank}.pid", str(os.getpid()).encode())

    def _claimant(self, rank: int) -> int | None:
        try:
            pid = int((self._folder() / f"rank-{rank}.pid").read_text())
        except (OSError, ValueError):
            return None
        return None if pid == os.getpid() else pid

    def _never_sent(self, src: int, n: int, where: str, helper: _Helper | None) -> None:
        problem = f"rank {self.rank} waits at {where} for objects from rank {src} (its " \
                  f"message {n + 1}), but rank {src}'s trace "
        if helper is not None and helper.ended():
            ended = helper.process.wait()
            error = (final_json(ended.stdout) or {}).get("error")
            if isinstance(error, dict):
                place = f"{error['file']}:{error['line']}: " if error.get("file") else ""
                raise MemlensError(problem + f"failed: {place}{error.get('message', '')}")
            if ended.returncode != 0:
                tail = "\n".join(list(helper.tail)[-10:])
                raise MemlensError(problem + f"ended with status {ended.returncode}" +
                                   (f":\n{tail}" if tail else ""))
        raise MemlensError(problem + "ended without sending them")

    def _start_helper(self, src: int, where: str) -> _Helper:
        """Trace rank src in a helper worker, which pauses after each send."""
        if _peer_argv is None:
            raise MemlensError(f"rank {self.rank} receives objects from rank {src} at {where}: "
                               "tracing the sender needs the memlens command line (memlens run)")
        print(f"{HELPER_NOTICE} {src} for its sends to rank {self.rank} "
              f"(received at {where})", file=sys.stderr, flush=True)

        def line(text: str) -> None:
            if text.startswith(HELPER_NOTICE):  # nested helpers: shown, and counted
                print(text, file=sys.stderr, flush=True)
            elif progress_record(text) is None:
                helper.tail.append(text)

        env = worker_env(extra={ENV_FOLDER: str(self._folder()),
                                ENV_HELPER_OF: str(os.getpid())},
                         defaults={"OMP_NUM_THREADS": "1"})
        helper = _Helper(WorkerProcess([sys.executable, "-m", "memlens", *_peer_argv(src)],
                                       _peer_cwd, env, on_stderr_line=line))
        helper.process.start()
        return helper


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _record(src: int, dst: int, n: int) -> str:
    return f"{src}-to-{dst}-{n}.pkl"


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a reader polls for the name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
