"""Objects one simulated rank sends another (`send_object_list` / `recv_object_list`).

A pipeline stage that is not told its input shapes learns them at the first step from the
previous stage (`recv_object_list`), and sends its own outputs' shapes on. A simulated rank has
no other process to receive from, so each rank's sends are recorded in a folder the whole job
shares, and a receive reads the record of the sender's send:

- `<folder>/S-to-D-N.pkl`: the N-th objects rank S sent rank D (pickled by the patch, tensors as
  their metadata: patches/torch_object_p2p.py);
- `<folder>/rank-S.pid`: rank S is being traced by that process (wait for its sends);
- `<folder>/rank-S.done`: rank S's trace ended: what it did not send, it never sends.

When the record is not there and no live process traces the sender, the receiver traces the
sender itself, in a helper worker (the same job, `--rank S`) that ends right after its send to
the receiver; the helper's own receives do the same, so the chain goes back to stage 0. With
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
from ..process_tree import WorkerProcess
from ..worker_protocol import final_json, progress_record, worker_env

ENV_FOLDER = "MEMLENS_OBJECTS_DIR"
ENV_STOP = "MEMLENS_OBJECTS_STOP"  # "D:N": this helper ends after its N-th send to rank D
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


class ObjectExchange:
    """The simulated rank's side of the record folder."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        given = os.environ.get(ENV_FOLDER)
        self._own_folder = not given
        self.folder = Path(given) if given else None
        self._sent: dict[int, int] = defaultdict(int)
        self._received: dict[int, int] = defaultdict(int)
        stop = os.environ.get(ENV_STOP)
        self._stop = tuple(int(x) for x in stop.split(":")) if stop else None
        if self.folder is not None:
            self._claim()

    # -- this rank's side ------------------------------------------------------------------
    def send(self, dst: int, payload: bytes) -> None:
        n = self._sent[dst]
        self._sent[dst] += 1
        _write(self._folder() / _record(self.rank, dst, n), payload)
        if self._stop == (dst, n + 1):  # a helper: the receiver has what it waited for
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def receive(self, src: int, where: str) -> bytes:
        """The payload of src's next send to this rank; `where` (file:line of the receive)
        goes into the errors."""
        n = self._received[src]
        path = self._folder() / _record(src, self.rank, n)
        helper_log: list[str] | None = None
        while not path.exists():
            if (self._folder() / f"rank-{src}.done").exists():
                raise MemlensError(f"rank {self.rank} waits at {where} for objects from rank "
                                   f"{src} (its message {n + 1}), but rank {src}'s trace ended "
                                   "without sending them")
            if self._traced_elsewhere(src):
                time.sleep(POLL_S)
                continue
            if helper_log is not None:
                tail = "\n".join(helper_log[-10:])
                raise MemlensError(f"rank {self.rank} waits at {where} for objects from rank "
                                   f"{src} (its message {n + 1}), but rank {src}'s trace ended "
                                   f"without sending them" + (f":\n{tail}" if tail else ""))
            helper_log = self._trace_sender(src, n + 1, where)
        self._received[src] += 1
        return path.read_bytes()

    def close(self) -> None:
        if self.folder is None:
            return
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        elif self._stop is None:  # a helper ends early: it never says it is done
            (self.folder / f"rank-{self.rank}.done").touch()

    # -- the folder ------------------------------------------------------------------------
    def _folder(self) -> Path:
        if self.folder is None:  # a rank traced alone: a folder for its helpers
            self.folder = Path(tempfile.mkdtemp(prefix="memlens-objects-"))
            self._claim()
        return self.folder

    def _claim(self) -> None:
        _write(self.folder / f"rank-{self.rank}.pid", str(os.getpid()).encode())

    def _traced_elsewhere(self, rank: int) -> bool:
        try:
            pid = int((self._folder() / f"rank-{rank}.pid").read_text())
        except (OSError, ValueError):
            return False
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _trace_sender(self, src: int, count: int, where: str) -> list[str]:
        """Trace rank src in a helper worker until its `count`-th send to this rank. Returns the
        tail of its log when it died without a result; raises its error when it failed."""
        if _peer_argv is None:
            raise MemlensError(f"rank {self.rank} receives objects from rank {src} at {where}: "
                               "tracing the sender needs the memlens command line (memlens run)")
        print(f"{HELPER_NOTICE} {src} up to its send to rank {self.rank} "
              f"(received at {where})", file=sys.stderr, flush=True)
        tail: deque[str] = deque(maxlen=LOG_TAIL)

        def line(text: str) -> None:
            if text.startswith(HELPER_NOTICE):  # nested helpers: shown, and counted
                print(text, file=sys.stderr, flush=True)
            elif progress_record(text) is None:
                tail.append(text)

        env = worker_env(extra={ENV_FOLDER: str(self._folder()),
                                ENV_STOP: f"{self.rank}:{count}"},
                         defaults={"OMP_NUM_THREADS": "1"})
        process = WorkerProcess([sys.executable, "-m", "memlens", *_peer_argv(src)], _peer_cwd, env,
                                on_stderr_line=line)
        try:
            process.start()
            ended = process.wait()
        finally:
            process.stop()
        summary = final_json(ended.stdout) or {}
        error = summary.get("error") if isinstance(summary.get("error"), dict) else None
        if error is not None and not (self._folder() / _record(src, self.rank, count - 1)).exists():
            place = f"{error['file']}:{error['line']}: " if error.get("file") else ""
            raise MemlensError(f"rank {self.rank} waits at {where} for objects from rank {src}, "
                               f"whose trace failed: {place}{error.get('message', '')}")
        return list(tail) if ended.returncode != 0 and not summary else []


def _record(src: int, dst: int, n: int) -> str:
    return f"{src}-to-{dst}-{n}.pkl"


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a reader polls for the name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
