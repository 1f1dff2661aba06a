"""Attributes that differ between a group's blocks (a layer index, a name), watched while
block 1 is recorded (engine/layer_replay.py): a read of one means the blocks may not be one
program, except a layer index only handed to the cache the block is given (layer_cache.py)."""

from __future__ import annotations

import functools
from typing import Any

from .layer_cache import LayerIndex
from .layer_groups import Group, _MISSING


class AttributeReads:
    """Class-level properties in front of the instances' values of the differing attributes,
    for one block's call; `unwatch` takes them away and says what was read."""

    def __init__(self, caches):
        self.caches = caches  # layer_cache.BlockCaches: `noted` while a cache may be handed one
        self._watched: dict[tuple[type, str], Any] = {}
        self._read: str | None = None

    def watch(self, group: Group, i: int) -> None:
        """While block i runs, a read of an attribute that differs between the blocks is
        noted (a class-level property in front of the instances' values)."""
        watched = {id(m): k for k, m in enumerate(group.blocks[i].modules())}
        self._read = None
        for cls, name in group.differing:
            if (cls, name) in self._watched:
                continue
            own = cls.__dict__.get(name, _MISSING)
            if own is not _MISSING and hasattr(own, "__get__"):
                group.disabled = f"`{cls.__name__}.{name}` differs between the blocks"
                continue

            def get(obj, name=name, cls=cls):
                if id(obj) in watched and self._read is None:
                    value = obj.__dict__.get(name, _MISSING)
                    if self.caches.noted is not None and type(value) is int:
                        return LayerIndex(value, (watched[id(obj)], name),
                                          functools.partial(self.used, cls.__name__))
                    self._read = f"`{cls.__name__}.{name}`"
                try:
                    return obj.__dict__[name]
                except KeyError:
                    for klass in cls.__mro__[1:]:
                        if name in klass.__dict__:
                            return klass.__dict__[name]
                    raise AttributeError(name) from None

            def put(obj, value, name=name):
                obj.__dict__[name] = value

            self._watched[(cls, name)] = own
            setattr(cls, name, property(get, put))

    def used(self, owner: str, where: tuple) -> None:
        """A layer index was used for its value (layer_cache.LayerIndex)."""
        if self._watched and self._read is None:
            self._read = f"`{owner}.{where[1]}`"

    def unwatch(self) -> str | None:
        for (cls, name), own in self._watched.items():
            if own is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
        self._watched = {}
        read, self._read = self._read, None
        return read
