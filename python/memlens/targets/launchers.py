"""`--launch launch.json:NAME` and `--from-script train.sh[:LINE] [-- ARGS]`: how a job is
launched, turned into a script target and its world size.

launch.json is read (targets/launch.py). A shell script is run, with recording launchers
(shell_record): the job is what the shell computed. Its text is read only to name lines: bash
reports a command inside `if`/loops by its last line, and an undefined `$GPUS` by what it
expands to."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import Location, MemlensError
from .launch import TorchrunCommand, torchrun_commands
from .script import ScriptTarget
from .job import Job
from .launch_argv import launched_script
from .shell_record import TIMEOUT_ENV, Launch, ShellRun, record_launches

__all__ = ["Job", "from_command", "from_launch", "from_script"]
LAUNCHERS = "torchrun, python -m torch.distributed.run/launch, accelerate launch or python train.py"
STDERR_TAIL_LINES = 20


def from_launch(spec: str) -> Job:
    """`path/to/launch.json:Configuration name`."""
    from .launch import find_launch_config, read_env_file

    path, sep, name = spec.partition(":")
    if not sep or not name:
        raise MemlensError(f"--launch needs FILE:NAME, e.g. .vscode/launch.json:\"Train 8B\" "
                           f"(got {spec!r})")
    cfg = find_launch_config(path, name)
    where = Location(path, cfg.line)
    if cfg.unresolved:
        raise MemlensError(f"configuration {name!r} uses {', '.join(sorted(set(cfg.unresolved)))}"
                           ", which only VS Code can resolve (it depends on the open editor "
                           "or an input prompt)", where)
    env = read_env_file(cfg.env_file, dict(os.environ), cfg) if cfg.env_file else {}
    env.update(cfg.env)  # VS Code: `env` wins over `envFile`
    if cfg.module == "accelerate.commands.launch":  # accelerate's launcher, as a module
        launched = launched_script("accelerate", list(cfg.args), cfg.cwd)
        target = ScriptTarget(path=launched.script or "", module=launched.module,
                              args=list(launched.args), cwd=cfg.cwd,
                              env={**env, **launched.env})
        return Job(target, launched.world_size, launched.nproc_per_node, launched.problem,
                   where, note=launched.note)
    target = ScriptTarget(path=cfg.program or "", module=cfg.module, args=list(cfg.args),
                          cwd=cfg.cwd, env=env)
    if not cfg.runs_torchrun:  # one plain process
        return Job(target, location=where)
    nproc, problem = cfg.nproc_per_node, None
    if cfg.nproc_text is None:
        nproc = 1  # torchrun's default --nproc-per-node
    elif nproc is None:
        problem = _nproc_problem(cfg.nproc_text)
    world = nproc * (cfg.nnodes or 1) if nproc is not None else None
    return Job(target, world, nproc, problem, where)


def from_command(words: list[str], cwd: str) -> Job | None:
    """`memlens run -- accelerate launch [OPTIONS] train.py ARGS` (or `-- torchrun ...`,
    `-- deepspeed --num_gpus N ...`): the job the launcher would start; None when `words` run no
    launcher."""
    name = os.path.basename(words[0]) if words else ""
    if name == "accelerate" and words[1:2] == ["launch"]:
        launcher, args = "accelerate", words[2:]
    elif name in ("torchrun", "deepspeed"):
        launcher, args = name, words[1:]
    else:
        return None
    launched = launched_script(launcher, args, cwd)
    if launched.script is None and launched.module is None:
        raise MemlensError(f"{launcher} is given no training script (or -m module): "
                           + " ".join(words))
    target = ScriptTarget(path=launched.script or "", module=launched.module,
                          args=list(launched.args), cwd=cwd, env=dict(launched.env))
    return Job(target, launched.world_size, launched.nproc_per_node, launched.problem, None,
               launched.local_rank_arg, note=launched.note)


def from_script(spec: str, script_args: list[str] | None = None) -> Job:
    """`scripts/train.sh` (the launch command it runs) or `scripts/train.sh:LINE`, run with
    `script_args` as its own arguments."""
    path, line = _split_line(spec)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MemlensError(f"cannot read {path}: {e}") from None
    written = torchrun_commands(text)
    run = record_launches(path, list(script_args or []))
    here = [(_line_in(launch, path, written), launch) for launch in run.launches]
    if not here:
        raise _nothing_launched(path, run, written)
    if line is not None:
        chosen = _at_line(path, line, here, written)
        note = None
    else:
        distributed = [h for h in here if h[1].launcher != "python"]
        pool = distributed or here
        chosen = pool[0]
        note = None if len(pool) == 1 else (
            f"{path} runs {len(pool)} launch commands ({_lines(pool)}); tracing the first, "
            f"choose another with --from-script {path}:LINE")
    job = _job(path, *chosen, written)
    job.note = "; ".join(n for n in (note, job.note) if n) or None
    return job


def _job(path: str, line: int | None, launch: Launch, written: list[TorchrunCommand]) -> Job:
    where = Location(path, line) if line is not None else Location(
        launch.source or path, launch.line or 1)
    launched = launched_script(launch.launcher, launch.args, launch.cwd)
    if launched.script is None and launched.module is None:
        raise MemlensError(f"{launch.launcher} is given no training script (or -m module): "
                           f"{launch.command}", where)
    problem = launched.problem
    as_written = next((c for c in written if c.line == line), None)
    if problem and as_written is not None and as_written.nproc_text and \
            "$" in as_written.nproc_text and not _recorded_nproc(launch):
        problem = f"--nproc_per_node is {as_written.nproc_text}, which is empty when the " \
                  "script runs (a variable the script does not define?)"
    env = {**launch.env, **launched.env}  # what the launcher sets wins, as it does
    target = ScriptTarget(path=launched.script or "", module=launched.module,
                          args=list(launched.args), cwd=_cwd_for(launched.script, launch.cwd, path),
                          env=env)
    return Job(target, launched.world_size, launched.nproc_per_node, problem, where,
               launched.local_rank_arg, note=launched.note)


def _recorded_nproc(launch: Launch) -> str:
    for i, a in enumerate(launch.args):
        name, eq, value = a.lstrip("-").partition("=")
        if name in ("nproc_per_node", "nproc-per-node"):
            return value if eq else (launch.args[i + 1] if i + 1 < len(launch.args) else "")
    return ""


def _line_in(launch: Launch, path: str, written: list[TorchrunCommand]) -> int | None:
    """The line of `path` where the launch command starts, if it ran from `path` itself (bash
    names a command inside `if` or a loop by its last line)."""
    if launch.line is None or not launch.source or not _same_file(launch.source, path):
        return None
    for c in written:
        if c.line <= launch.line <= c.end_line:
            return c.line
    return launch.line


def _at_line(path: str, line: int, here, written) -> tuple[int | None, Launch]:
    span = next(((c.line, c.end_line) for c in written if c.line <= line <= c.end_line),
                (line, line))
    for at, launch in here:
        if at is not None and span[0] <= at <= span[1]:
            return at, launch
    ran = _lines(here) or "none from the script itself"
    raise MemlensError(f"line {line} of {path} launched nothing when the script ran; "
                       f"the launch commands it ran: {ran}", Location(path, line))


def _lines(here) -> str:
    named = [f"line {at}" if at is not None else f"{launch.source}:{launch.line}"
             for at, launch in here]
    return ", ".join(named)


def _nothing_launched(path: str, run: ShellRun, written: list[TorchrunCommand]) -> MemlensError:
    tail = "\n".join(run.stderr.rstrip().splitlines()[-STDERR_TAIL_LINES:])
    details = f"{path}'s stderr (last lines):\n{tail}\n" if tail else ""
    if run.returncode is None:
        return MemlensError(f"{path} ran for {run.timeout_s:g} s without launching anything "
                            f"and was stopped (a longer time: {TIMEOUT_ENV}=SECONDS)",
                            Location(path, 1), details)
    if run.returncode != 0:
        return MemlensError(f"{path} exited with status {run.returncode} before launching "
                            "anything", Location(path, _bash_error_line(run.stderr, path)), details)
    message = f"{path} ran to its end without running a launch command ({LAUNCHERS})"
    if written:
        lines = ", ".join(str(c.line) for c in written)
        message += f"; it names torchrun at line {lines}, which did not run (a branch not taken?)"
    return MemlensError(message, Location(path, written[0].line if written else 1), details)


def _bash_error_line(stderr: str, path: str) -> int:
    """bash's `train.sh: line 7: ...` of the last error, else 1."""
    found = re.findall(rf"^{re.escape(path)}: line (\d+):", stderr, re.MULTILINE)
    return int(found[-1]) if found else 1


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _split_line(spec: str) -> tuple[str, int | None]:
    path, sep, tail = spec.rpartition(":")
    if sep and tail.isdigit():
        return path, int(tail)
    return spec, None


def _cwd_for(script: str | None, cwd: str, shell_script: str) -> str:
    """Where the launcher ran; failing that (a training script not there), beside the shell
    script, which older memlens accepted."""
    if script and not Path(cwd, script).is_file():
        beside = Path(shell_script).resolve().parent
        if (beside / script).is_file():
            return str(beside)
    return cwd


def _nproc_problem(text: str) -> str:
    if text in ("gpu", "auto", "cpu", "xpu"):
        return f"--nproc_per_node {text} depends on the machine it runs on"
    if "$" in text:
        return f"--nproc_per_node is {text}, a variable the launch configuration does not define"
    return f"--nproc_per_node {text!r} is not a number"
