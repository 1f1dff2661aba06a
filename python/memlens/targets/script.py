"""Run an unmodified training script inside the tracer, as `python script.py ARGS` would."""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from pathlib import Path

from ..errors import MemlensError, StopTracing
from .failure import StderrTail, exit_error, script_error

if TYPE_CHECKING:
    from ..engine.tracer import Tracer


@dataclass
class ScriptTarget:
    path: str
    args: list[str] = field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    module: str | None = None  # `python -m module` instead of a path

    @property
    def name(self) -> str:
        return self.module or Path(self.path).stem

    def to_json(self) -> dict:
        return {"kind": "script", "name": self.name, "path": self.path, "args": self.args,
                "cwd": self.cwd}


def resolve(target: ScriptTarget) -> Path | None:
    if target.module:
        return None
    base = Path(target.cwd) if target.cwd else Path.cwd()
    path = (base / target.path).resolve()
    if not path.is_file():
        raise MemlensError(f"script not found: {target.path} (looked in {base})")
    return path


def made_up_values(tracer: Tracer) -> list[tuple[str, int, str, str, object]]:
    """The values the trace answered where code read a tensor's value, where each was read:
    (file, line, function, read, value)."""
    out = []
    for stack, op, value in tracer.accountant.placeholders:
        top = tracer.stacks.top_frame(stack)
        if top:
            out.append((top[0], top[1], top[2], op, value))
    return out


def run_script(target: ScriptTarget, tracer: Tracer) -> bool:
    """Run the script under `tracer`. Returns True if tracing stopped it after the requested
    iterations, False if it ran to its end. Raises ScriptError if the script failed."""
    path = resolve(target)
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_env = {k: os.environ.get(k) for k in target.env}
    display = target.module or target.path
    rank = getattr(tracer, "rank", None)
    who = f"{display} (rank {rank.rank} of {rank.world_size})" if rank is not None else display
    stopped = False
    saved_stderr = sys.stderr
    stderr = sys.stderr = StderrTail(sys.stderr)
    try:
        if target.cwd:
            os.chdir(target.cwd)
        os.environ.update(target.env)
        sys.argv = [str(path) if path else target.module or "", *target.args]
        sys.path.insert(0, str(path.parent) if path else os.getcwd())
        with tracer:
            try:
                # Keep the script's globals alive until the trace is marked as ended: their
                # release is teardown, not part of the training step.
                if path is not None:
                    script_globals = runpy.run_path(str(path), run_name="__main__")
                else:
                    script_globals = runpy.run_module(target.module, run_name="__main__",
                                                      alter_sys=True)
                tracer.mark_end()
                del script_globals
            except StopTracing:
                stopped = True
            except SystemExit as e:
                tracer.mark_end()
                if e.code not in (None, 0):
                    raise exit_error(e.code, who, stderr.last_line()) from None
            except MemlensError:
                raise
            except Exception as e:
                raise script_error(e, who, made_up_values(tracer)) from None
    finally:
        sys.stderr = saved_stderr
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return stopped
