"""The search space from the command line and `[tool.memlens.fit]` (pyproject.toml) or `[fit]`
(memlens.toml): built-in axes (`--micro-batch 1,2,4`), their mapping to the script's flags
(`--axis micro-batch=--batch-size`), generic axes of script flags (`--arg "--lr=1e-4,3e-4"`)
and environment variables (`--env "SEQ=1024,2048"`), and `--monotone` orders. The command line
wins over the file, axis by axis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MemlensError
from .script_flags import is_megatron, megatron_target
from .space import BUILTIN_AXES, DIRECTIONS, Axis, Space, Target, check_builtin_values, parse_values

CONFIG_KEYS = {*BUILTIN_AXES, "device", "axis", "arg", "env", "monotone", "sort", "jobs",
               "iterations"}


def load_config(path: Path | None, start: Path | None = None
                ) -> tuple[dict[str, Any], str | None]:
    """The fit table of the given file, else of the memlens.toml / pyproject.toml nearest to
    `start` (default: the working directory)."""
    from ..targets.recipe import find_recipe_file, tomllib

    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise MemlensError(f"cannot read {path}: {e}") from None
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("memlens", {})
        found = (path, data)
    else:
        found = find_recipe_file(start or Path.cwd())
    if found is None:
        return {}, None
    source, data = found
    table = data.get("fit", {}) if isinstance(data, dict) else {}
    where = "[tool.memlens.fit]" if source.name == "pyproject.toml" else "[fit]"
    if not isinstance(table, dict):
        raise MemlensError(f"{source}: {where} must be a table")
    unknown = sorted(set(table) - CONFIG_KEYS)
    if unknown:
        raise MemlensError(f"{source}: {where} has unknown keys {', '.join(unknown)}; known: "
                           f"{', '.join(sorted(CONFIG_KEYS))}")
    return table, f"{source} {where}"


def _pairs(cli: list[str] | None, config: dict[str, Any] | None, what: str) -> dict[str, str]:
    """NAME=REST pairs, from `--what NAME=REST` options and a TOML table, the options last."""
    out = {str(k): v for k, v in (config or {}).items()}
    for text in cli or []:
        name, sep, rest = text.partition("=")
        if not sep or not name.strip():
            raise MemlensError(f"--{what} takes NAME=VALUE (got {text!r})")
        out[name.strip()] = rest
    return out


def _target(text: str) -> tuple[Target, str | None]:
    """`--batch-size`, `--batch-size:1,2,4`, `env:SEQ`, `env:SEQ:1024,2048`."""
    if text.startswith("env:"):
        name, _, values = text[4:].partition(":")
        target = Target("env", name)
    else:
        name, _, values = text.partition(":")
        target = Target("flag", name)
    if not name:
        raise MemlensError(f"--axis: no flag or variable in {text!r} (e.g. "
                           "--axis micro-batch=--batch-size or --axis seq=env:SEQ_LEN)")
    return target, values or None


def build_space(args, config: dict[str, Any], job) -> Space:
    megatron = is_megatron(job)
    mappings = _pairs(args.axis, config.get("axis"), "axis")
    monotone = _pairs(args.monotone, config.get("monotone"), "monotone")
    axes: list[Axis] = []
    for name, (direction, _) in BUILTIN_AXES.items():
        given = getattr(args, name.replace("-", "_"))
        mapping = mappings.pop(name, None)
        target, inline = _target(mapping) if mapping else (None, None)
        raw = given if given is not None else (inline or config.get(name))
        if raw is None:
            if mapping:
                raise MemlensError(f"--axis {name}={mapping}: give its values (--{name} 1,2 or "
                                   f"--axis {name}={mapping}:1,2)")
            continue
        values = check_builtin_values(name, parse_values(raw, f"--{name}"))
        if name == "gpus":
            target = Target("world")
        elif target is None:
            target = megatron_target(name) if megatron else None
            if target is None:
                raise MemlensError(
                    f"--{name}: which flag of the script is it? Name it with --axis "
                    f"{name}=--the-flag (or --axis {name}=env:VARIABLE); Megatron-LM scripts "
                    "get Megatron's own flags (see docs/fit.md)")
        axes.append(Axis(name, values, target, direction))
    for name, mapping in mappings.items():  # axes of the user's own naming
        target, inline = _target(mapping)
        if inline is None:
            raise MemlensError(f"--axis {name}={mapping}: give its values after a colon, e.g. "
                               f"--axis {name}={mapping}:1,2")
        axes.append(Axis(name, parse_values(inline, f"--axis {name}"), target))
    for flag, raw in _pairs(args.arg, config.get("arg"), "arg").items():
        if not flag.startswith("-"):
            raise MemlensError(f"--arg {flag}=...: the script flag starts with - or --")
        axes.append(Axis(flag, parse_values(raw, f"--arg {flag}"), Target("flag", flag)))
    for var, raw in _pairs(args.env, config.get("env"), "env").items():
        axes.append(Axis(var, parse_values(raw, f"--env {var}"), Target("env", var)))
    return Space(_with_monotone(axes, monotone))


def _with_monotone(axes: list[Axis], monotone: dict[str, str]) -> list[Axis]:
    names = {a.name for a in axes}
    for name, direction in monotone.items():
        if name not in names:
            raise MemlensError(f"--monotone {name}: no such axis "
                               f"(axes: {', '.join(sorted(names))})")
        if direction not in DIRECTIONS:
            raise MemlensError(f"--monotone {name}={direction}: use up, down or none")
    out = []
    for a in axes:
        direction = monotone.get(a.name, a.direction)
        if direction != "none" and a.name not in BUILTIN_AXES and direction != a.direction:
            try:  # a generic axis in memory order: numbers sort as numbers
                values = tuple(sorted(a.values, key=float))
            except ValueError:
                values = a.values
            a = Axis(a.name, values, a.target, direction)
        elif direction != a.direction:
            a = Axis(a.name, a.values, a.target, direction)
        out.append(a)
    if not out:
        raise MemlensError("nothing to search: give at least one axis, e.g. --micro-batch 1,2,4 "
                           "(see memlens fit --help)")
    return out
