"""`--launch launch.json:NAME` and `--from-script train.sh[:LINE]`: how a job is launched,
turned into a script target and its world size. The reading itself is memlens.targets.launch (shared
with the language server); here are the choices and the messages for what cannot be used."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import Location, MemlensError
from .script import ScriptTarget


@dataclass
class Job:
    target: ScriptTarget
    world_size: int | None = None
    nproc_per_node: int | None = None
    # Why the launch line gives no world size (None when it gives one, or says nothing).
    world_size_problem: str | None = None
    location: Location | None = None  # where the job is defined, for that message


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
    target = ScriptTarget(path=cfg.program or "", module=cfg.module, args=list(cfg.args),
                          cwd=cfg.cwd, env=env)
    problem = _nproc_problem(cfg.nproc_text, cfg.nproc_per_node)
    return Job(target, cfg.world_size, cfg.nproc_per_node, problem, where)


def from_script(spec: str) -> Job:
    """`scripts/train.sh` (its one torchrun command) or `scripts/train.sh:LINE`."""
    from .launch import torchrun_commands

    path, line = _split_line(spec)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MemlensError(f"cannot read {path}: {e}") from None
    problems: list[tuple[int, str]] = []
    commands = torchrun_commands(text, problems)
    if line is not None:
        commands = [c for c in commands if c.line <= line <= c.end_line]
        problems = [p for p in problems if p[0] == line]
    if not commands:
        if problems:
            raise MemlensError(problems[0][1], Location(path, problems[0][0]))
        at = f" at line {line}" if line is not None else ""
        raise MemlensError(f"no torchrun (or python -m torch.distributed.run) command{at} in "
                           f"{path}", Location(path, line or 1))
    if len(commands) > 1:
        lines = ", ".join(str(c.line) for c in commands)
        raise MemlensError(f"{path} has {len(commands)} torchrun commands (lines {lines}); "
                           f"choose one with --from-script {path}:LINE", Location(path, 1))
    cmd = commands[0]
    where = Location(path, cmd.line)
    target = ScriptTarget(path=cmd.script or "", module=cmd.module, args=list(cmd.args),
                          cwd=_cwd_for(cmd.script, path), env=dict(cmd.env))
    return Job(target, cmd.world_size, cmd.nproc_per_node,
               _nproc_problem(cmd.nproc_text, cmd.nproc_per_node), where)


def _split_line(spec: str) -> tuple[str, int | None]:
    path, sep, tail = spec.rpartition(":")
    if sep and tail.isdigit():
        return path, int(tail)
    return spec, None


def _cwd_for(script: str | None, shell_script: str) -> str:
    """Scripts name their training script relative to where they are run from, usually the
    repository root (the current directory); failing that, relative to the shell script."""
    here = os.getcwd()
    if script and not Path(here, script).is_file():
        beside = Path(shell_script).resolve().parent
        if (beside / script).is_file():
            return str(beside)
    return here


def _nproc_problem(text: str | None, value: int | None) -> str | None:
    if value is not None:
        return None
    if text is None:
        return "the command does not say --nproc_per_node"
    if text in ("gpu", "auto", "cpu", "xpu"):
        return f"--nproc_per_node {text} depends on the machine it runs on"
    if "$" in text:
        return f"--nproc_per_node is {text}, a variable the script does not define"
    return f"--nproc_per_node {text!r} is not a number"
