"""Run a launch shell script with recording launchers first on its PATH, and collect what it
would have launched: `--from-script` sees what the shell computes (arrays, `${1:-default}`,
`$((...))`, `cd`, `source`d files, `export`s) because the shell itself computes it.

The script's other commands do run (echo, mkdir, sourcing files): it runs in the current
directory, as `bash script.sh ARGS` would, with stdin closed and a time limit. The launchers
(torchrun, python -m torch.distributed.run/launch, accelerate launch, python train.py) only
record; srun/mpirun/mpiexec run their command once, here, so the launcher inside is recorded.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MemlensError
from ..worker.process_tree import MARK, WorkerProcess
from . import launch_recorder as recorder

TIMEOUT_ENV = "MEMLENS_SCRIPT_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
SHIMS = ("torchrun", "accelerate", "deepspeed", "python", "python3",
         f"python{sys.version_info.major}.{sys.version_info.minor}", "srun", "mpirun", "mpiexec")
# What bash itself changes, not the script, and the recording's own worker mark (worker/):
# never part of the rank's environment.
SHELL_OWN = {"_", "SHLVL", "PWD", "OLDPWD", "BASH_ENV", MARK}

# Before the script's first line (BASH_ENV): every command exports its line and file, so a
# launcher knows where it was called from (with functrace, also inside functions and subshells;
# a `bash -c '...'` has no file and keeps the line of the command that started it).
_INIT = f"""\
if [ -n "${{__MEMLENS_USER_BASH_ENV-}}" ]; then . "$__MEMLENS_USER_BASH_ENV"; fi
set -o functrace
trap 'if [ -n "${{BASH_SOURCE[0]-}}" ]; then export {recorder.LINE}=$LINENO \
{recorder.SOURCE}="${{BASH_SOURCE[0]}}"; fi' DEBUG
"""


# First on the script's PYTHONPATH: catches launchers the PATH does not find (by full path).
_SITE = """\
import importlib.util
_spec = importlib.util.spec_from_file_location("_memlens_launch_recorder", {recorder!r})
_recorder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recorder)
_recorder.from_site()
"""


@dataclass
class Launch:
    """One launch command the script ran."""

    # torchrun | torch.distributed.run | torch.distributed.launch | accelerate | python
    launcher: str
    args: list[str]  # the launcher's arguments, after the shell's expansion
    cwd: str
    env: dict[str, str]  # what the script set or changed (exports, VAR=value prefixes)
    line: int | None  # the line of `source` that ran it, as bash tells it
    source: str | None

    @property
    def command(self) -> str:
        return shlex.join([self.launcher, *self.args])


@dataclass
class ShellRun:
    launches: list[Launch] = field(default_factory=list)
    returncode: int | None = None  # None: stopped at the time limit
    stderr: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S


def record_launches(script: str, args: list[str]) -> ShellRun:
    """Run `bash script ARGS` with the recorders and return what it launched."""
    timeout = _timeout()
    base = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="memlens-launch-") as tmp:
        shims, records = Path(tmp, "bin"), Path(tmp, "records")
        shims.mkdir()
        records.mkdir()
        _write_shims(shims)
        site = Path(tmp, "site")
        site.mkdir()
        (site / "sitecustomize.py").write_text(_SITE.format(recorder=str(recorder.__file__)),
                                               encoding="utf-8")
        init = Path(tmp, "init.sh")
        init.write_text(_INIT, encoding="utf-8")
        env = dict(base)
        env.update({"PATH": f"{shims}{os.pathsep}{base.get('PATH', '')}",
                    "BASH_ENV": str(init), recorder.RECORD_DIR: str(records),
                    recorder.REAL_PATH: base.get("PATH", ""), recorder.SITE_DIR: str(site),
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (str(site), base.get("PYTHONPATH", "")) if p)})
        if base.get("BASH_ENV"):
            env["__MEMLENS_USER_BASH_ENV"] = base["BASH_ENV"]
        run = ShellRun(timeout_s=timeout)
        # A worker process (worker/process_tree): what the script leaves running, in its group or
        # a session of its own, ends with it, and a child holding its stderr delays nothing.
        err: list[str] = []
        bash = WorkerProcess(["bash", script, *args], None, env, on_stderr_line=err.append)
        try:
            bash.start()
        except OSError as e:
            raise MemlensError(f"cannot run bash for {script}: {e}") from None
        ended = bash.wait(timeout)
        run.returncode = None if ended.timed_out else ended.returncode
        run.stderr = "".join(line + "\n" for line in err)
        for path in sorted(records.glob("*.json")):
            raw = json.loads(path.read_text(encoding="utf-8"))
            run.launches.append(Launch(raw["launcher"], raw["args"], raw["cwd"],
                                       _changed_env(raw["env"], base, (str(shims), str(site))),
                                       raw["line"], raw["source"]))
    return run


def _write_shims(folder: Path) -> None:
    body = (f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S "
            f"{shlex.quote(recorder.__file__)} \"$0\" \"$@\"\n")
    for name in SHIMS:
        path = folder / name
        path.write_text(body, encoding="utf-8")
        path.chmod(0o755)


def _changed_env(env: dict[str, str], base: dict[str, str], ours: tuple[str, ...]
                 ) -> dict[str, str]:
    """The variables the script set or changed, without the recorders' own."""
    out = {}
    for key, value in env.items():
        if key in SHELL_OWN or key.startswith("BASH_FUNC_"):
            continue
        if key in ("PATH", "PYTHONPATH"):
            value = os.pathsep.join(p for p in value.split(os.pathsep) if p not in ours)
            if not value and key not in base:
                continue
        if base.get(key) != value:
            out[key] = value
    return out


def _timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        raise MemlensError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if value <= 0:
        raise MemlensError(f"{TIMEOUT_ENV} must be more than 0 seconds")
    return value
