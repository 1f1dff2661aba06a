"""Which tests start a process (a memlens trace, a language server, a fresh interpreter): those
are `slow`, so that `pytest -m "not slow"` is the minute-long loop it claims to be.

Found from the code a test runs, not from marks someone must remember: the test function, every
fixture it uses, and what those call among the test suite's own functions (support/, the test
modules, conftest) — a reference to `subprocess`, asyncio's subprocess calls, or a pytest-lsp
client (a language server in its own process) makes the test slow. What static reading cannot
see (a method of an object that starts a worker) the run catches: `ProcessWatch` records every
interpreter a test not marked slow starts, and the test fails with the names of what it ran.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from types import CodeType, FunctionType, ModuleType

TESTS = Path(__file__).resolve().parent.parent
GUARD_FIXTURE = "_quick_tests_start_no_interpreter"  # conftest.py's fixture of ProcessWatch

# Names whose mention in a test's code means a new process.
_SPAWNING_NAMES = frozenset({"subprocess", "Popen", "create_subprocess_exec",
                             "create_subprocess_shell", "ProcessPoolExecutor", "multiprocessing",
                             "posix_spawn", "fork"})
# Libraries whose fixtures start a process of their own (pytest-lsp starts the server).
_SPAWNING_LIBRARIES = ("pytest_lsp",)


def _codes(code: CodeType):
    """A code object and every code object nested in it (closures, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _is_ours(obj) -> bool:
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return path is not None and Path(path).resolve().is_relative_to(TESTS)


def _library_spawns(obj) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module.split(".")[0] in _SPAWNING_LIBRARIES


class SpawnReader:
    """Answers "does this function start a process?" for the suite's functions, memoised."""

    def __init__(self) -> None:
        self._seen: dict[CodeType, bool] = {}

    def spawns(self, func) -> bool:
        func = inspect.unwrap(func)
        if _library_spawns(func):
            return True
        code = getattr(func, "__code__", None)
        if not isinstance(code, CodeType):
            return False
        if code in self._seen:
            return self._seen[code]
        self._seen[code] = False  # a recursive call is answered by the outer reading
        names = {name for c in _codes(code) for name in c.co_names}
        result = bool(names & _SPAWNING_NAMES) or any(
            self._spawns_by_name(func.__globals__.get(name)) for name in names)
        self._seen[code] = result
        return result

    def _spawns_by_name(self, value) -> bool:
        if isinstance(value, ModuleType):
            return value.__name__ in ("subprocess", "multiprocessing", "asyncio.subprocess")
        if isinstance(value, type) and _is_ours(value):
            members = (getattr(m, "__func__", m) for m in vars(value).values())
            return any(self.spawns(m) for m in members if isinstance(m, FunctionType))
        if isinstance(value, FunctionType) and (_is_ours(value) or _library_spawns(value)):
            return self.spawns(value)
        return False


def starts_processes(item, reader: SpawnReader) -> bool:
    """Whether a collected test, or any fixture it uses, starts a process."""
    func = getattr(item, "function", None)
    if func is not None and reader.spawns(func):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        if name == GUARD_FIXTURE:  # the watch itself
            continue
        for fixturedef in defs:
            if reader.spawns(fixturedef.func):
                return True
    return False


def _is_interpreter(argv) -> bool:
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    first = os.path.basename(os.fsdecode(argv[0])) if argv else ""
    return first.startswith("python") or os.fsdecode(argv[0]) == sys.executable


class ProcessWatch:
    """Records the Python interpreters started while a test not marked slow runs."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._original = subprocess.Popen.__init__

    def __enter__(self) -> "ProcessWatch":
        original, started = self._original, self.started

        def recording_init(popen, args, *rest, **kwargs):
            if _is_interpreter(args):
                started.append(" ".join(map(os.fsdecode, args))[:200])
            return original(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = recording_init
        return self

    def __exit__(self, *exc) -> None:
        subprocess.Popen.__init__ = self._original
