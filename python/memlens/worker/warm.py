"""The warm worker, its parent's side: one process per interpreter with torch and memlens
imported (cli/fork_server.py), from which each `python -m memlens ...` worker is forked instead
of started, so that a trace pays for neither torch's import nor Dynamo's.

`prestart(python, env)` starts the warm process (the language server at start and before each
trace, `--ranks all` and `memlens fit` before their workers); `worker_process(argv, ...)` is
what they start each worker with: a forked child where the warm process can stand for `argv`
(the same interpreter, a `-m memlens` command, the same import-time environment, memlens' and
torch's files unchanged since it started), else a cold process as before. Either is a WorkerProcess:
its time limit, memory limit, cancel and the ending of every process it starts are the same.
A warm process whose files changed is replaced (and stops once the traces forked from it have
ended); one that cannot start (no compiler for the shim, say) leaves its parent on cold
workers. `MEMLENS_WARM_WORKER=0` turns it off.

The fake-CUDA shim is loaded before torch and stays for the process's life: a warm process
either has it (for GPU targets, the default) or not (for `--device cpu`, whose trace must not
see a CUDA device), one of each per interpreter at most. A child whose target needs the other
kind re-executes itself as a cold worker (worker/fork_child.py).
"""

from __future__ import annotations

import array
import json
import os
import queue
import signal
import socket
import subprocess
import threading
from typing import Callable

from .process_tree import MARK, _PR_SET_PDEATHSIG, _PRCTL, WorkerProcess
from .source_stamps import changed

ENABLE_ENV = "MEMLENS_WARM_WORKER"
READY_TIMEOUT_S = 300.0  # the warm process imports what a cold worker would: as long at worst
# What is read while importing torch and memlens: a child whose values differ starts cold.
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "TORCH", "PYTORCH", "CUDA", "NVIDIA", "MEMLENS_",
                        "OMP_", "MKL_", "OPENBLAS_", "KMP_", "XDG_CACHE_HOME", "CXX", "TRITON",
                        "HOME")


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)
            and k != MARK and not k.startswith(ENABLE_ENV)}


class ForkedChild:
    """A forked worker, as WorkerProcess uses a Popen: pid, returncode, wait, stdout, stderr."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None
        self.stdout = self.stderr = None
        self._ended = threading.Event()

    def ended(self, returncode: int) -> None:
        self.returncode = returncode
        self._ended.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
        return self.returncode


class ForkServer:
    """One warm process: started at once, ready once its imports are done."""

    def __init__(self, python: str, env: dict[str, str], shim: bool = True):
        self.python, self.env = python, dict(env)
        self.error: str | None = None
        self._ready = threading.Event()
        self._watch: list[list] = []
        self._lock = threading.Lock()
        self._next_id = 0
        self._answers: dict[int, queue.Queue] = {}
        self._children: dict[int, ForkedChild] = {}
        self._retired = False
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [python, "-m", "memlens.cli.fork_server", str(child.fileno()),
                 *([] if shim else ["--no-shim"])],
                pass_fds=[child.fileno()], cwd="/", env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent)
        except OSError as e:
            parent.close()
            self.error, self._proc = str(e), None
            self._ready.set()
            return
        finally:
            child.close()
        self._sock = parent
        threading.Thread(target=self._read, daemon=True, name="memlens-warm-worker").start()

    def ready(self, timeout: float | None = READY_TIMEOUT_S) -> bool:
        """Wait until the warm process has imported everything; False if it cannot serve."""
        return self._ready.wait(timeout) and self.error is None and self.alive()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stale(self) -> bool:
        """memlens or torch changed on disk since the warm process imported them."""
        return any(changed(path, stamp) for path, stamp in self._watch)

    def serves(self, python: str, env: dict[str, str]) -> bool:
        return python == self.python and import_time_env(env) == import_time_env(self.env)

    def fork(self, args: list[str], cwd: str | None, env: dict[str, str],
             memory_limit: int | None, stdout_fd: int, stderr_fd: int) -> ForkedChild:
        """A child running `memlens <args>` with these descriptors as its stdout and stderr."""
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            answer = self._answers[request_id] = queue.Queue()
            message = json.dumps({"id": request_id, "args": args, "cwd": cwd, "env": env,
                                  "memory_limit": memory_limit}).encode()
            self._sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                            array.array("i", [stdout_fd, stderr_fd]))])
        try:
            reply = answer.get(timeout=60)
        except queue.Empty:
            raise OSError("the warm worker did not answer") from None
        finally:
            self._answers.pop(request_id, None)
            self._stop_if_idle()  # retired meanwhile, and this fork made no child
        if "pid" not in reply:
            raise OSError(reply.get("error") or "the warm worker could not fork")
        return self._children[reply["pid"]]

    def stop(self) -> None:
        if self.alive():
            self._proc.kill()
            self._proc.wait()

    def retire(self) -> None:
        """Stop once every child forked from it has ended: it is being replaced (its files
        changed, another environment), and stopping it now would end the traces still running
        from it (their parent-death signal)."""
        self._retired = True
        self._stop_if_idle()

    def _stop_if_idle(self) -> None:
        # A fork asked for is in _answers until its child is in _children: read in that order
        if self._retired and not self._answers and not self._children:
            self.stop()

    def _read(self) -> None:  # a thread of its own
        while True:
            try:
                data = self._sock.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            if "ready" in message:
                self._watch = message.get("watch") or []
                self.error = None if message["ready"] else message.get("error", "failed")
                self._ready.set()
            elif "exited" in message:
                child = self._children.pop(message["exited"], None)
                if child is not None:  # else an orphan the warm process reaped
                    child.ended(message["returncode"])
                self._stop_if_idle()
            else:
                if "pid" in message:  # registered before the child's exit can be read
                    self._children[message["pid"]] = ForkedChild(message["pid"])
                answer = self._answers.get(message["id"])
                if answer is not None:
                    answer.put(message)
        # The warm process is gone, and with it (their parent-death signal) its children.
        self.error = self.error or "the warm worker exited"
        self._ready.set()
        for child in list(self._children.values()):
            child.ended(-signal.SIGKILL)
        self._children.clear()


def _die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class ForkedWorkerProcess(WorkerProcess):
    """A WorkerProcess forked from a warm process; a cold one if the fork fails."""

    def __init__(self, server: ForkServer, argv: list[str], cwd: str | None,
                 env: dict[str, str], memory_limit: int | None = None,
                 on_stderr_line: Callable[[str], None] = lambda line: None):
        super().__init__(argv, cwd, env, memory_limit, on_stderr_line)
        self.server = server
        self.forked = False

    def _spawn(self):
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            child = self.server.fork(self.argv[3:], self.cwd, self.env, self.memory_limit,
                                     out_write, err_write)
        except OSError:
            for fd in (out_read, err_read):
                os.close(fd)
            return super()._spawn()
        finally:
            os.close(out_write)
            os.close(err_write)
        child.stdout, child.stderr = os.fdopen(out_read, "rb"), os.fdopen(err_read, "rb")
        self.forked = True
        return child


# -- one warm process per interpreter and kind, for this process's lifetime ----------------
_servers: dict[tuple[str, bool], ForkServer] = {}
_servers_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0"


def needs_shim(argv: list[str]) -> bool:
    """Whether a `memlens ...` command line's target is a GPU (the default) rather than the
    host CPU (`--device cpu`)."""
    for k, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--device=cpu" or (arg == "--device" and argv[k + 1:k + 2] == ["cpu"]):
            return False
    return True


def prestart(python: str, env: dict[str, str], shim: bool = True) -> ForkServer | None:
    """Start the warm process for `python` (with the fake-CUDA shim, or without it for CPU
    targets) now, unless one that serves `env` is up to date; without waiting. Call it from a
    thread that lives as long as the warm process should: the warm process dies with the thread
    that started it (PR_SET_PDEATHSIG)."""
    if not enabled():
        return None
    with _servers_lock:
        server = _servers.get((python, shim))
        if server is not None and server.serves(python, env) and \
                not (server._ready.is_set() and (not server.alive() or server.stale())):
            return server
        if server is not None:
            server.retire()
        server = _servers[(python, shim)] = ForkServer(python, env, shim)
        return server


def worker_process(argv: list[str], cwd: str | None, env: dict[str, str],
                   memory_limit: int | None = None,
                   on_stderr_line: Callable[[str], None] = lambda line: None) -> WorkerProcess:
    """The worker for `argv`: forked from the warm process `prestart` started for its
    interpreter and the kind of its target (needs_shim) where that one can stand for it
    (waiting for its imports to finish: a cold worker would import the same), else a cold
    one."""
    server = _servers.get((argv[0], needs_shim(argv))) \
        if enabled() and argv[1:3] == ["-m", "memlens"] else None
    if server is not None and server.serves(argv[0], env) and server.ready() \
            and not server.stale():
        return ForkedWorkerProcess(server, argv, cwd, env, memory_limit, on_stderr_line)
    return WorkerProcess(argv, cwd, env, memory_limit, on_stderr_line)


def stop_all() -> None:
    with _servers_lock:
        for server in _servers.values():
            server.stop()
        _servers.clear()
