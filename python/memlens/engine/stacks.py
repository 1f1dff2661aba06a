"""Interned call stacks: which user code allocated each tensor.

A "user frame" is any Python frame outside torch, memlens and the standard library (so a
model's own file, a training script and third-party libraries such as transformers all count). Stacks are
tuples of frame ids, innermost first, and are interned: each distinct stack is stored once.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from types import CodeType, FrameType

_MAX_DEPTH = 48


def _prefix(path: str) -> str:
    return os.path.join(os.path.abspath(path), "")


def _own_roots() -> tuple[str, ...]:
    import torch  # torch is always importable where stacks are captured

    package = os.path.dirname(os.path.dirname(__file__))  # memlens/, above engine/
    # Inductor's generated wrapper code: the compiled program's line is the caller's.
    generated = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or _inductor_default_cache_dir(torch)
    return (_prefix(package), _prefix(os.path.dirname(torch.__file__)), _prefix(generated))


def _inductor_default_cache_dir(torch) -> str:
    """Inductor's default cache folder, read from its torch-free module file: importing it as
    `torch._inductor.runtime.cache_dir_utils` runs `torch._inductor`'s package init, which
    imports Dynamo (seconds per process) in every trace, compiled or not."""
    name = "torch._inductor.runtime.cache_dir_utils"
    module = sys.modules.get(name)
    if module is None:
        path = os.path.join(os.path.dirname(torch.__file__), *name.split(".")[1:]) + ".py"
        spec = importlib.util.spec_from_file_location("_memlens_inductor_cache_dir", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.default_cache_dir()


def _site_packages() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({_prefix(paths[k]) for k in ("purelib", "platlib") if paths.get(k)})


def _stdlib() -> tuple[str, ...]:
    # Only the base interpreter's library: in a virtual environment `platstdlib` is the venv's
    # lib/pythonX.Y, which holds site-packages.
    path = sysconfig.get_paths().get("stdlib")
    return (_prefix(path),) if path else ()


class StackTable:
    def __init__(self) -> None:
        self._own = _own_roots()  # torch and memlens
        self._site = _site_packages()  # third-party libraries: user code for us
        self._stdlib = _stdlib()
        # Keyed by id(code), not the code: hashing a code object hashes its bytecode, names
        # and constants each time (about 1 us; two lookups per user frame made most of a
        # capture's cost). The code is kept in the value, so no id is reused while the table
        # lives. Code that cannot be hashed (Dynamo's, with a dict among its constants) is
        # never a user's.
        self._is_user: dict[int, tuple[CodeType, bool]] = {}
        self.frames: list[tuple[str, int, str]] = []  # (file, line, function)
        self._frame_ids: dict[tuple[int, int], int] = {}  # (id(code), line) -> frame id
        self._frame_of: dict[tuple[str, int, str], int] = {}  # (file, line, function) -> id
        self.stacks: list[tuple[int, ...]] = [()]  # stack 0 is "no user frame"
        self._stack_ids: dict[tuple[int, ...], int] = {(): 0}

    def is_user_path(self, path: str) -> bool:
        if path.startswith("<"):  # <frozen runpy>, <string>
            return False
        full = os.path.abspath(path)
        if full.startswith(self._own):
            return False
        return full.startswith(self._site) or not full.startswith(self._stdlib)

    def is_site_package(self, path: str) -> bool:
        return os.path.abspath(path).startswith(self._site)

    def is_user_code(self, code: CodeType) -> bool:
        known = self._is_user.get(id(code))
        if known is None:
            try:
                hash(code)
                user = self.is_user_path(code.co_filename)
            except TypeError:  # code Dynamo generated, with a dict among its constants
                user = False
            known = self._is_user[id(code)] = (code, user)
        return known[1]

    def _frame_id(self, code: CodeType, line: int) -> int:
        """One frame per (file, line, function): two code objects of one function (a module
        run twice, code generated again) share it."""
        where = (code.co_filename, line, code.co_name)
        fid = self._frame_of.get(where)
        if fid is None:
            fid = self._frame_of[where] = len(self.frames)
            self.frames.append(where)
        return fid

    def capture(self, frame: FrameType | None = None) -> int:
        """Intern the user frames of the current Python stack; returns the stack id."""
        f = frame if frame is not None else sys._getframe(1)
        ids: list[int] = []
        frame_ids, is_user = self._frame_ids, self._is_user
        while f is not None and len(ids) < _MAX_DEPTH:
            code = f.f_code
            known = is_user.get(id(code))
            user = known[1] if known is not None else self.is_user_code(code)
            if user:
                key = (id(code), f.f_lineno)
                fid = frame_ids.get(key)
                if fid is None:
                    fid = frame_ids[key] = self._frame_id(code, f.f_lineno)
                ids.append(fid)
            f = f.f_back
        stack = tuple(ids)
        sid = self._stack_ids.get(stack)
        if sid is None:
            sid = self._stack_ids[stack] = len(self.stacks)
            self.stacks.append(stack)
        return sid

    def place(self, frame: FrameType | None = None) -> tuple[tuple[int, int], ...]:
        """The user frames of the current Python stack as (id(code), line), interning nothing
        (the snapshot holds only the stacks allocations have): a key for where a call is."""
        f = frame if frame is not None else sys._getframe(1)
        out = []
        while f is not None and len(out) < _MAX_DEPTH:
            if self.is_user_code(f.f_code):
                out.append((id(f.f_code), f.f_lineno))
            f = f.f_back
        return tuple(out)

    def top_frame(self, stack_id: int) -> tuple[str, int, str] | None:
        """The innermost user frame of a stack: the line a tensor is attributed to."""
        stack = self.stacks[stack_id]
        return self.frames[stack[0]] if stack else None
