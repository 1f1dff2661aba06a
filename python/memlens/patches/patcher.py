"""Apply attribute patches and undo them in reverse order."""

from __future__ import annotations

import warnings
from typing import Any

_MISSING = object()


class Patcher:
    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def setattr(self, owner: Any, name: str, value: Any) -> Any:
        """Replace `owner.name` with `value`; returns the original."""
        original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(
            owner, name, _MISSING)
        self._undo.append((owner, name, original))
        setattr(owner, name, value)
        return getattr(owner, name) if original is _MISSING else original

    def defer(self, undo) -> None:
        """Call `undo()` when undoing, in reverse order with the attribute patches (for changes
        that are not attributes, such as operator registrations)."""
        self._undo.append((None, undo, None))

    def set_everywhere(self, modules: list[Any], name: str, value: Any) -> None:
        """Replace `name` in modules[0] and in every other module that bound the same object
        (`from torch.cuda.memory import memory_allocated` copies the function into a module)."""
        original = vars(modules[0]).get(name, _MISSING)
        for mod in modules:
            if mod is modules[0] or (original is not _MISSING and vars(mod).get(name) is original):
                self.setattr(mod, name, value)

    def append(self, items: list, value: Any) -> None:
        """Add `value` to a list other modules hold by reference (mutated in place)."""
        if value not in items:
            items.append(value)
            self._undo.append((items, None, value))

    def undo(self) -> None:
        while self._undo:
            owner, name, original = self._undo.pop()
            if owner is None:  # deferred
                name()
            elif name is None:  # an append
                owner.remove(original)
            elif original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def check_version(library: str, version: str, tested: tuple[str, str]) -> None:
    """Warn (never fail) when a patched library is outside the versions the patches were tested
    on: the patch may then be unnecessary or wrong."""
    def key(v: str) -> tuple[int, ...]:
        parts = []
        for p in v.split("+")[0].split(".")[:3]:
            digits = "".join(ch for ch in p if ch.isdigit())
            parts.append(int(digits or 0))
        return tuple(parts)

    low, high = tested
    if not key(low) <= key(version) < key(high):
        warnings.warn(f"memlens: {library} {version} is outside the tested range [{low}, {high}); "
                      "estimates may be affected", stacklevel=3)
