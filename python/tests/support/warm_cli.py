"""`python -m memlens ARGS` forked from a warm worker (worker/warm.py) for the tests'
run_memlens: the child is what a cold worker is (its own session, stdin /dev/null, the
arguments, folder and environment given), less the seconds of importing torch and memlens,
which most of the suite's traces would otherwise pay each time.

One warm process per kind (the fake-CUDA shim or none, from `--device`) and import-time
environment (PYTHONHASHSEED, PYTHONPATH, MEMLENS_*, ...: worker/warm.py's `import_time_env`),
started on the second command that needs it (an environment used once, such as a test's own
PYTHONPATH, runs cold rather than cost a warm process), the last few kept. A warm process dies
with the thread that started it (PR_SET_PDEATHSIG), so one thread that lives as long as the test
session starts them all, whichever thread (a fixture's pool) asks."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from typing import Callable

from memlens.worker import warm

KEPT = 4  # warm processes at most (each ~0.5 GiB), the least recently used retired first
_servers: dict[tuple, warm.ForkServer] = {}
_seen: set[tuple] = set()
_lock = threading.Lock()
_starts: "queue.Queue[Callable[[], None]]" = queue.Queue()


def _starter() -> None:
    while True:
        _starts.get()()


threading.Thread(target=_starter, daemon=True, name="warm-cli-starter").start()


def _start(env: dict[str, str], shim: bool) -> warm.ForkServer:
    """A warm process, started by the session-long thread."""
    made: "queue.Queue[warm.ForkServer]" = queue.Queue()
    _starts.put(lambda: made.put(warm.ForkServer(sys.executable, env, shim)))
    return made.get()


def _server(argv: list[str], env: dict[str, str]) -> warm.ForkServer | None:
    shim = warm.needs_shim(argv[3:])
    key = (shim, tuple(sorted(warm.import_time_env(env).items())))
    with _lock:
        server = _servers.pop(key, None)
        if server is not None and (not server.alive() or server.stale()):
            server.retire()  # ends with the commands still forked from it
            server = None
        if server is None:
            if key not in _seen:
                _seen.add(key)
                return None
            server = _start(env, shim)
        _servers[key] = server
        while len(_servers) > KEPT:
            _servers.pop(next(iter(_servers))).retire()
    return server if server.ready() else None


def run(argv: list[str], cwd, env: dict[str, str], timeout: float
        ) -> subprocess.CompletedProcess | None:
    """The command's result, as subprocess.run(capture_output=True, text=True) gives it; None
    where no warm process can run it (turned off, or it failed to start)."""
    if env.get(warm.ENABLE_ENV, "1") == "0":
        return None
    server = _server(argv, env)
    if server is None:
        return None
    stderr: list[str] = []
    process = warm.ForkedWorkerProcess(server, argv, str(cwd) if cwd is not None else None, env,
                                       on_stderr_line=stderr.append)
    process.start()
    ended = process.wait(timeout)
    if ended.timed_out:
        raise subprocess.TimeoutExpired(argv, timeout)
    return subprocess.CompletedProcess(argv, ended.returncode, ended.stdout,
                                       "".join(line + "\n" for line in stderr))
