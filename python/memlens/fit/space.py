"""The search space of `memlens fit`: axes, their values, and the order of memory along them.

An axis is a name (a built-in such as `micro-batch`, or a script flag / environment variable of
a generic `--arg` / `--env` axis), its values in the order given, where a value goes in the job
(script_flags.py), and how memory moves along it:

- `up`: a larger value needs at least as much memory at equal other settings (micro-batch, seq);
- `down`: a larger value needs at most as much (tp, gpus, zero; recompute from none to full);
- `none`: nothing is known (pp, fsdp, fp8, and generic axes unless `--monotone` says).

A point is one value per axis. `at_most(p, q)`: p needs no more memory than q, as far as the
axes' orders tell (non-monotone values equal, every monotone one no further up). The search
prunes with it: anything above an out-of-memory point is out of memory too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from itertools import product

from ..errors import MemlensError

RECOMPUTE = ("none", "selective", "full")
SWITCH = ("off", "on")

# name: (direction, allowed values or None for positive integers)
BUILTIN_AXES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "gpus": ("down", None),
    "micro-batch": ("up", None),
    "seq": ("up", None),
    "recompute": ("down", RECOMPUTE),
    "tp": ("down", None),
    "pp": ("none", None),
    "zero": ("down", ("0", "1", "2", "3")),
    "fsdp": ("none", SWITCH),
    "fp8": ("none", SWITCH),
}
DIRECTIONS = ("up", "down", "none")


@dataclass(frozen=True)
class Target:
    """Where an axis' value goes: the job's world size, a script flag, or an env variable.
    `builtin` marks a built-in axis mapped to Megatron-LM's own flags."""
    kind: str  # "world", "flag", "env", "megatron"
    name: str = ""

    def describe(self) -> str:
        return {"world": "world size", "flag": self.name, "env": f"env {self.name}",
                "megatron": f"Megatron-LM flags for {self.name}"}[self.kind]


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]
    target: Target
    direction: str = "none"

    def rank(self, value: str) -> float | None:
        """The value's place in memory order (larger needs more), None on a non-monotone axis."""
        if self.direction == "none":
            return None
        if self.name == "recompute" and value in RECOMPUTE:
            position = RECOMPUTE.index(value)  # none > selective > full in memory
        else:
            try:
                position = float(value)
            except ValueError:
                position = self.values.index(value)  # the order the user gave
        return position if self.direction == "up" else -position


@dataclass(frozen=True)
class Point:
    values: tuple[str, ...]

    def key(self, axes: list[Axis]) -> str:
        return ",".join(f"{a.name}={v}" for a, v in zip(axes, self.values))

    def folder(self, axes: list[Axis]) -> str:
        """A folder name for the point: readable, and unique through a hash of the key."""
        key = self.key(axes)
        readable = re.sub(r"[^A-Za-z0-9.=_-]+", "_", key.replace(",", "_"))[:80].strip("_")
        return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"

    def get(self, axes: list[Axis], name: str) -> str | None:
        for a, v in zip(axes, self.values):
            if a.name == name:
                return v
        return None


class Space:
    def __init__(self, axes: list[Axis]):
        names = [a.name for a in axes]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise MemlensError(f"the axis {duplicate!r} is given twice")
        self.axes = axes
        self.points = [Point(tuple(v)) for v in product(*(a.values for a in axes))]

    def at_most(self, p: Point, q: Point) -> bool:
        """p needs no more memory than q, by the orders of the axes."""
        for axis, a, b in zip(self.axes, p.values, q.values):
            if axis.direction == "none":
                if a != b:
                    return False
            elif axis.rank(a) > axis.rank(b):
                return False
        return True

    def primary(self) -> int | None:
        """The axis the search bisects: micro-batch if it is monotone and varies, else the first
        monotone axis with several values."""
        candidates = [i for i, a in enumerate(self.axes)
                      if a.direction != "none" and len(a.values) > 1]
        for i in candidates:
            if self.axes[i].name == "micro-batch":
                return i
        return candidates[0] if candidates else None

    def describe(self) -> list[dict]:
        return [{"name": a.name, "values": list(a.values), "target": a.target.describe(),
                 "direction": a.direction} for a in self.axes]


def parse_values(text: str | list, what: str) -> tuple[str, ...]:
    """`1,2,4` (or a TOML list) as strings, in the given order."""
    items = text if isinstance(text, list) else str(text).split(",")
    values = tuple(str(v).strip() for v in items)
    if not values or any(not v for v in values):
        raise MemlensError(f"{what}: give comma-separated values, e.g. 1,2,4 (got {text!r})")
    if len(set(values)) != len(values):
        raise MemlensError(f"{what}: a value is given twice ({text!r})")
    return values


def check_builtin_values(name: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """Built-in axes take positive integers or their own words; integers are sorted."""
    _, allowed = BUILTIN_AXES[name]
    if allowed is not None:
        aliases = {"false": "off", "true": "on", "0": "off", "1": "on"} if allowed == SWITCH else {}
        values = tuple(aliases.get(v.lower(), v.lower()) for v in values)
        bad = [v for v in values if v not in allowed]
        if bad:
            raise MemlensError(f"--{name}: {bad[0]!r} is not one of {', '.join(allowed)}")
        return tuple(v for v in allowed if v in values)
    try:
        numbers = [int(v) for v in values]
    except ValueError:
        raise MemlensError(f"--{name} takes whole numbers (got {','.join(values)})") from None
    if any(n < 1 for n in numbers):
        raise MemlensError(f"--{name} takes numbers of at least 1 (got {','.join(values)})")
    return tuple(str(n) for n in sorted(numbers))
