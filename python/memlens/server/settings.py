"""The server's settings (the `memlens` section; see protocol.Settings), read leniently: a bad
value is reported and replaced by its default, never fatal."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from ..units import parse_bytes


@dataclass
class Settings:
    # None: not set; the worker uses the recipe's device, else the default (h100-80gb), as
    # `memlens trace` does. The setting's default must not win over a recipe's `device`.
    device: str | None = None
    budget: int | None = None  # bytes; None: the traced device's total memory
    iterations: int | None = None
    traceTimeout: float = 300.0
    memoryLimitMB: int = 0  # 0: twice the host's memory, at least 16 GiB; below 0: no limit
    traceOnSave: bool = False
    hotLines: int = 5
    inlayHints: bool = True
    python: str | None = None

    def memory_limit_bytes(self) -> int | None:
        """The worker's address-space limit (None: unlimited)."""
        if self.memoryLimitMB > 0:
            return self.memoryLimitMB * 1024 * 1024
        if self.memoryLimitMB < 0:
            return None
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
        # Address space, not resident memory: torch maps far more than it touches (thread
        # stacks, allocator arenas), so leave generous room above the physical memory.
        return max(2 * physical, 16 * 1024**3)


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"expected true or false, got {v!r}")


def _budget(v: Any) -> int | None:
    if v is None or v == "" or v == 0:
        return None
    if isinstance(v, bool):
        raise ValueError(f"expected a size such as \"70GiB\", got {v!r}")
    if isinstance(v, (int, float)):
        if v < 0:
            raise ValueError(f"a budget cannot be negative: {v!r}")
        return int(v)
    return parse_bytes(str(v))


def _positive(kind):
    def check(v: Any):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ValueError(f"expected a positive number, got {v!r}")
        return kind(v)

    return check


def _opt_str(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def _opt_iterations(v: Any) -> int | None:
    if v is None or v == 0:
        return None
    return _positive(int)(v)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    return int(v)


_PARSERS = {
    "device": lambda v: str(v).strip().lower() or None if v is not None else None,
    "budget": _budget,
    "iterations": _opt_iterations,
    "traceTimeout": _positive(float),
    "memoryLimitMB": _int,
    "traceOnSave": _bool,
    "hotLines": lambda v: max(0, _int(v)),
    "inlayHints": _bool,
    "python": _opt_str,
}


def parse_settings(raw: Any, warn=lambda message: None) -> Settings:
    """Settings from a `memlens` section (a dict); unknown keys and bad values are reported
    through `warn` and ignored."""
    s = Settings()
    if raw is None:
        return s
    if not isinstance(raw, dict):
        warn(f"memlens settings must be an object, got {type(raw).__name__}")
        return s
    known = {f.name for f in fields(Settings)}
    for key, value in raw.items():
        if key not in known:
            continue  # the extension's own settings (colours, ...) share the section
        try:
            setattr(s, key, _PARSERS[key](value))
        except (ValueError, TypeError) as e:
            warn(f"setting memlens.{key}: {e}; using the default")
    return s
