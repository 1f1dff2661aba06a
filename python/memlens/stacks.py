"""Interned call stacks: which user code allocated each tensor.

A "user frame" is any Python frame outside torch, memlens and the standard library (so a
model's own file, a training script and libraries such as transformers all count). Stacks are
tuples of frame ids, innermost first, and are interned: each distinct stack is stored once.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import CodeType, FrameType

_MAX_DEPTH = 48


def _library_roots() -> tuple[str, ...]:
    roots = {os.path.dirname(os.path.abspath(__file__))}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.abspath(path))
    import torch  # torch is always importable where stacks are captured

    roots.add(os.path.dirname(os.path.abspath(torch.__file__)))
    return tuple(sorted(roots))


class StackTable:
    def __init__(self) -> None:
        self._roots = _library_roots()
        self._is_user: dict[CodeType, bool] = {}
        self.frames: list[tuple[str, int, str]] = []  # (file, line, function)
        self._frame_ids: dict[tuple[CodeType, int], int] = {}
        self.stacks: list[tuple[int, ...]] = [()]  # stack 0 is "no user frame"
        self._stack_ids: dict[tuple[int, ...], int] = {(): 0}

    def is_user_code(self, code: CodeType) -> bool:
        known = self._is_user.get(code)
        if known is None:
            path = code.co_filename
            known = not (path.startswith("<") or os.path.abspath(path).startswith(self._roots))
            self._is_user[code] = known
        return known

    def capture(self, frame: FrameType | None = None) -> int:
        """Intern the user frames of the current Python stack; returns the stack id."""
        f = frame if frame is not None else sys._getframe(1)
        ids: list[int] = []
        frame_ids, is_user = self._frame_ids, self._is_user
        while f is not None and len(ids) < _MAX_DEPTH:
            code = f.f_code
            user = is_user.get(code)
            if user is None:
                user = self.is_user_code(code)
            if user:
                key = (code, f.f_lineno)
                fid = frame_ids.get(key)
                if fid is None:
                    fid = frame_ids[key] = len(self.frames)
                    self.frames.append((code.co_filename, f.f_lineno, code.co_name))
                ids.append(fid)
            f = f.f_back
        stack = tuple(ids)
        sid = self._stack_ids.get(stack)
        if sid is None:
            sid = self._stack_ids[stack] = len(self.stacks)
            self.stacks.append(stack)
        return sid

    def top_frame(self, stack_id: int) -> tuple[str, int, str] | None:
        """The innermost user frame of a stack: the line a tensor is attributed to."""
        stack = self.stacks[stack_id]
        return self.frames[stack[0]] if stack else None
