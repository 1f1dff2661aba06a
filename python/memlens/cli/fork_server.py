"""The warm worker: a process with the fake-CUDA shim, torch, Dynamo and memlens' tracer imported
once, which forks a fresh child per trace (copy-on-write) and runs `memlens <args>` in it, as
`python -m memlens <args>` would. Its parent side is worker/warm.py.

`python -m memlens.cli.fork_server FD`, FD a SOCK_SEQPACKET socket to the parent:

- it sends `{"ready": ..., "watch": [[path, stamp], ...]}` once imported (what changes when a
  restart is due: memlens' sources and folders, torch's and the site-packages folders;
  worker/source_stamps.py);
- each request `{"id", "args", "cwd", "env", "memory_limit"}` comes with two descriptors (the
  child's stdout and stderr); it answers `{"id", "pid"}` (or `{"id", "error"}`), and
  `{"exited": pid, "returncode": n}` (Popen's sign convention) when the child ends.

The child is what a cold worker is (process_tree._preexec): a session of its own, a subreaper,
killed with its parent, under the memory limit, stdin /dev/null. Nothing here ever runs user
code in the warm process itself, and it starts no thread of its own, so forking stays safe.
"""

from __future__ import annotations

import array
import gc
import json
import os
import signal
import socket
import sys

MAX_MESSAGE = 1 << 20


def send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One request and the descriptors that came with it; (None, []) once the parent is gone."""
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(2 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return (json.loads(data) if data else None), list(fds)


def watched_files() -> list[list]:
    """What the parent checks before each fork: memlens' own sources and folders (shim.cpp
    too), torch's install and the site-packages folder holding it (worker/source_stamps.py)."""
    import memlens
    import torch

    from memlens.worker.source_stamps import watched

    torch_folder = os.path.dirname(torch.__file__)
    return watched(os.path.dirname(memlens.__file__),
                   [torch_folder, os.path.dirname(torch_folder)])


def preload(shim: bool = True) -> None:
    """What every trace imports before the script's first line; `shim`: the fake-CUDA shim
    too (GPU targets; a CPU target's process must not have it)."""
    from memlens.cuda.build import ensure_fake_cuda_support

    if shim:
        ensure_fake_cuda_support(1)  # the child installs its own device count
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - FakeTensorMode imports it
    import memlens.cli.main  # noqa: F401
    import memlens.engine.tracer  # noqa: F401
    import memlens.snapshot.build  # noqa: F401
    import memlens.targets.script  # noqa: F401
    import memlens.targets.session  # noqa: F401
    _compiler()


def _compiler() -> None:
    """What a script's first torch.compile pays once per process, paid here once for every
    trace forked from this one: Inductor's compiler imported (about 0.8 s) and triton's source
    hash (about 0.3 s, which triton caches), named by each generated kernel's metadata.
    Megatron compiles its fused functions in every trace (`jit_fuser` is torch.compile). It
    starts no thread and no process. A cold `memlens run` still imports them only when the
    script compiles (patches/torch_compile.py)."""
    import torch._inductor.compile_fx  # noqa: F401

    try:
        from torch._inductor.runtime.triton_compat import triton_key

        triton_key()
    except Exception:  # noqa: BLE001 - no triton, or none that hashes here: nothing to save
        pass


def main() -> int:
    import warnings

    warnings.simplefilter("ignore")  # the warm process's own warnings go nowhere anyway
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        preload(shim="--no-shim" not in sys.argv[2:])
    except BaseException as e:  # noqa: BLE001 - the parent then runs cold workers
        send(sock, {"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    warnings.resetwarnings()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = os.getpid()
    # Python's recommendation for a process that forks: the warm heap (torch and memlens
    # imported) in the permanent generation, so that a child's full collections neither walk
    # it nor write to its pages (copy-on-write); its traces leave it so (engine/heap.py).
    gc.freeze()
    send(sock, {"ready": True, "pid": server, "watch": watched_files()})
    import select

    while True:
        readable, _, _ = select.select([sock, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap(sock)
        if sock in readable:
            request, fds = receive(sock)
            if request is None:
                return 0
            try:
                pid = os.fork()
            except OSError as e:
                send(sock, {"id": request["id"], "error": str(e)})
                pid = -1
            if pid == 0:
                _child(request, fds, [sock.fileno(), wake_read, wake_write], server)
            for fd in fds:
                os.close(fd)
            if pid > 0:
                send(sock, {"id": request["id"], "pid": pid})


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)
        send(sock, {"exited": pid, "returncode": code})


def _child(request: dict, fds: list[int], inherited: list[int], server: int) -> None:
    """In the forked child of the warm process `server` (its pid): become the worker, run
    memlens, never return."""
    code = 1
    try:
        _become_worker(request, fds, inherited, server)
        from memlens.cli.main import main as memlens_main

        code = memlens_main(request["args"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - printed as a cold worker's interpreter would
        import traceback

        traceback.print_exc()
    finally:
        from memlens.worker.process_tree import end_children

        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            end_children()
            os._exit(code)


def _become_worker(request: dict, fds: list[int], inherited: list[int], server: int) -> None:
    import io
    import random

    from memlens.worker import fork_child
    from memlens.worker.process_tree import _preexec

    os.setsid()
    apply_limits = _preexec(request.get("memory_limit"), parent=server)
    if apply_limits is not None:
        apply_limits()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in inherited:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (devnull, *fds):
        os.close(fd)
    sys.stdout = sys.__stdout__ = _text_stream(io, 1)
    sys.stderr = sys.__stderr__ = _text_stream(io, 2)
    os.chdir(request["cwd"] or os.getcwd())
    os.environ.clear()
    os.environ.update(request["env"])
    # as `python -m memlens` started here has it: this folder first, then what the warm
    # process has after its own first entry (PYTHONPATH is the same: worker/warm.py checks)
    sys.path[:] = list(dict.fromkeys([os.getcwd(), *sys.path[1:]]))
    random.seed()
    fork_child.forked = True
    import memlens

    sys.argv = [os.path.join(os.path.dirname(memlens.__file__), "__main__.py"), *request["args"]]


def _text_stream(io, fd: int):
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", write_through=True)


if __name__ == "__main__":
    sys.exit(main())
