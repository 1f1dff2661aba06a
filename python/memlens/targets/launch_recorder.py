"""The body of the recording launchers that `--from-script` puts first on the shell script's PATH
(`torchrun`, `accelerate`, `python`, `python3`, `srun`, `mpirun`, ...).

Run by path with `python -I -S` (no memlens import, standard library only), never imported. A
launch command writes one JSON record -- the launcher, its arguments, the working directory, the
environment and the script line that ran it -- and exits 0 without running anything. Anything
else (`python -c ...`, `python -m pip ...`, `accelerate config`) runs the real program.

    launch_recorder.py NAME ARGS...     # NAME: the name the shim was called by

A launcher the PATH does not find (`/opt/conda/bin/torchrun`, `$CONDA_PREFIX/bin/python -m
torch.distributed.run`) is caught by the `sitecustomize` the script's PYTHONPATH starts with,
which loads this file and calls from_site() before the interpreter runs anything else.
"""

from __future__ import annotations  # any Python 3 the script runs may load this file

import json
import os
import sys
import time

RECORD_DIR = "__MEMLENS_RECORD_DIR"  # where records go
REAL_PATH = "__MEMLENS_REAL_PATH"  # the PATH without the shims, to find the real programs
LINE, SOURCE = "__MEMLENS_LINE", "__MEMLENS_SOURCE"  # set by the shell's DEBUG trap
SITE_DIR = "__MEMLENS_SITE_DIR"  # the folder of our sitecustomize, first on PYTHONPATH
OWN = (RECORD_DIR, REAL_PATH, LINE, SOURCE, SITE_DIR, "__MEMLENS_USER_BASH_ENV")

LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch")
# Python's own options that take a value (`python -W ignore train.py`).
PYTHON_VALUE_OPTIONS = ("-W", "-X", "--check-hash-based-pycs")
# srun / mpirun options that take a value when written apart (`srun -N 2 torchrun ...`).
WRAPPER_VALUE_OPTIONS = {
    "-N", "-n", "-c", "-p", "-t", "-J", "-o", "-e", "-w", "-G", "-A", "-q", "-x", "-D", "-H",
    "-np", "-npernode", "--nodes", "--ntasks", "--ntasks-per-node", "--cpus-per-task",
    "--partition", "--time", "--job-name", "--output", "--error", "--nodelist", "--gpus",
    "--gpus-per-node", "--gpus-per-task", "--account", "--qos", "--exclude", "--chdir",
    "--mem", "--container-image", "--container-mounts", "--host", "--hostfile", "-hostfile",
    "--map-by", "--bind-to", "-x", "--mca", "-mca",
}


def main(argv: list[str]) -> int:
    name, args = os.path.basename(argv[0]), argv[1:]
    if name in ("torchrun", "deepspeed"):
        return record(name, args)
    if name == "accelerate":
        if args[:1] == ["launch"]:
            return record("accelerate", args[1:])
        return run_real(name, args)
    if name in ("srun", "mpirun", "mpiexec"):
        return run_wrapped(args)
    return python(name, args)


def python(name: str, args: list[str]) -> int:
    """`python -m torch.distributed.run ...` or `python train.py ...` is a launch; any other
    use of Python (`-c`, `-m pip`, a prompt) runs the real interpreter."""
    launch = python_launch(args)
    if launch is not None:
        return record(*launch)
    return run_real(name, args)


def python_launch(args: list[str]) -> tuple[str, list[str]] | None:
    """(launcher, its arguments) when the interpreter's arguments launch training, else None.
    A script named torchrun or accelerate is that console script, run by an interpreter."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] not in ("-", "-m", "-c"):
        i += 2 if args[i] in PYTHON_VALUE_OPTIONS else 1
    rest = args[i:]
    if rest[:1] == ["-m"] and len(rest) > 1 and rest[1] in LAUNCH_MODULES:
        launcher = "accelerate" if rest[1] == "accelerate.commands.launch" else rest[1]
        return launcher, rest[2:]
    if not rest or rest[0].startswith("-"):
        return None
    script = os.path.basename(rest[0])
    if script == "torchrun":
        return "torchrun", rest[1:]
    if script == "accelerate" and rest[1:2] == ["launch"]:
        return "accelerate", rest[2:]
    if rest[0].endswith(".py"):
        return "python", rest
    return None


def from_site() -> None:
    """From sitecustomize, in any interpreter the script starts: record a distributed launch and
    end the process, or hand over to the sitecustomize ours hides. (Not `python file.py`: Python
    programs the script runs start helpers of their own, pip's build backends for one.)"""
    argv = getattr(sys, "orig_argv", None)  # Python 3.10+
    launch = python_launch(argv[1:]) if argv else None
    if launch is not None and launch[0] != "python" and RECORD_DIR in os.environ:
        record(*launch)
        sys.stdout.flush()
        os._exit(0)
    import importlib

    own, saved = os.environ.get(SITE_DIR, ""), sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != own]
    sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved


def run_wrapped(args: list[str]) -> int:
    """`srun [options] COMMAND ...`: run COMMAND once, here (its launcher is recorded)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in WRAPPER_VALUE_OPTIONS else 1
    if i >= len(args):
        return 0
    path = find(args[i], os.environ.get("PATH", ""))
    if path is None:
        sys.stderr.write(f"{args[i]}: command not found\n")
        return 127
    os.execv(path, args[i:])
    return 127


def run_real(name: str, args: list[str]) -> int:
    path = find(name, os.environ.get(REAL_PATH, ""))
    if path is None:
        sys.stderr.write(f"{name}: command not found\n")
        return 127
    os.execv(path, [name, *args])
    return 127


def find(name: str, path: str) -> str | None:
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def record(launcher: str, args: list[str]) -> int:
    env = {k: v for k, v in os.environ.items() if k not in OWN}
    line = os.environ.get(LINE, "")
    entry = {"launcher": launcher, "args": args, "cwd": os.getcwd(), "env": env,
             "line": int(line) if line.isdigit() else None,
             "source": os.environ.get(SOURCE) or None}
    folder = os.environ[RECORD_DIR]
    name = os.path.join(folder, f"{time.time_ns():020d}-{os.getpid()}.json")
    with open(name + ".part", "w", encoding="utf-8") as f:
        json.dump(entry, f)
    os.replace(name + ".part", name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
