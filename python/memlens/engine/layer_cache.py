"""Key/value caches a block writes its own entry of (engine/layer_replay.py).

Hugging Face's models make a cache in training too (the config's default `use_cache=True`):
every decoder layer is handed the same `Cache` and writes its own entry, found by its layer
index, with `cache.update(key, value, self.layer_idx)`. The entry keeps a copy of the layer's
keys and values until the cache is let go. A layer index differs between blocks, so a block
that reads it is not provably its siblings' program; but one that only hands it to a declared
cache's `update` is, writing its own entry.

While a block is recorded, a read of such an index gives a LayerIndex: any use of its value (a
comparison, arithmetic, a list index, formatting) is noted, and ends the group's replay, as any
read did before; handed to the cache's `update` it is the block's own entry. A library declares
its cache class (plugins/hf/transformers.py), whose `update` hands the index to
`BlockCaches.index`. What the entry held before the call and holds after it is described
(`entry_state`), so that a replayed block can write its entry as the recorded one did; the
tensors it held that the call frees (a decode step's keys, concatenated onto) are slots of the
recording, freed by place.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from .layer_tape import CONSTANTS, Unsupported, has_values, rid_of, tensor_meta
from .shadow_values import give_values, small_values

# Values an entry's new tensor may carry, replayed as they were (elements; more: traced in full)
ENTRY_VALUES = 16


class LayerIndex:
    """A block's layer index while it is recorded: its value, and who hears of a use of it."""

    __slots__ = ("value", "where", "_on_use")

    def __init__(self, value: int, where: tuple, on_use: Callable[[tuple], None]):
        self.value = value
        self.where = where  # (position of the module in the block, attribute name)
        self._on_use = on_use

    def used(self) -> int:
        self._on_use(self.where)
        return self.value


def _using(name: str):
    def method(self, *args):
        return getattr(self.used(), name)(*[a.used() if isinstance(a, LayerIndex) else a
                                            for a in args])
    method.__name__ = name
    return method


# Every way Python reads an int's value, each noting the use (then behaving as the int).
for _name in ("__index__", "__int__", "__float__", "__bool__", "__hash__", "__eq__", "__ne__",
              "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__radd__", "__sub__",
              "__rsub__", "__mul__", "__rmul__", "__floordiv__", "__rfloordiv__", "__truediv__",
              "__rtruediv__", "__mod__", "__rmod__", "__divmod__", "__rdivmod__", "__pow__",
              "__rpow__", "__neg__", "__pos__", "__abs__", "__invert__", "__and__", "__rand__",
              "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__", "__rlshift__",
              "__rshift__", "__rrshift__", "__round__", "__trunc__", "__floor__", "__ceil__",
              "__str__", "__repr__", "__format__"):
    setattr(LayerIndex, _name, _using(_name))
LayerIndex.__getattr__ = lambda self, name: getattr(self.used(), name)
LayerIndex.__reduce__ = lambda self: (operator.index, (self.used(),))


class BlockCaches:
    """The cache classes libraries declared, and a block's own entry of one: found among a
    call's arguments, the entry a recorded block wrote and how, and whether another block's
    entry starts as that one did."""

    def __init__(self, ledger):
        self.ledger = ledger
        self._kinds: list[tuple[type, Callable[[Any], bool], Callable[[Any], list]]] = []
        self.noted: list[tuple] | None = None  # (where, index) handed to update while recording

    def declare(self, cls: type, accepts: Callable[[Any], bool],
                layers: Callable[[Any], list]) -> None:
        """A library's cache class, whose instances a block may be handed and write its own
        entry of, `layers(cache)[layer_index]`, through an `update` that passes the layer index
        to `index`. `accepts(cache)`: an instance whose update is that (not a subclass's own,
        not offloading)."""
        self._kinds.append((cls, accepts, layers))

    def layers_of(self, obj) -> list | None:
        for cls, accepts, layers in self._kinds:
            if isinstance(obj, cls) and accepts(obj):
                return layers(obj)
        return None

    def index(self, index):
        """A declared cache's `update` was handed `index`: the int, with the recorded block's
        own entry noted."""
        if not isinstance(index, LayerIndex):
            return index
        if self.noted is None:
            return index.used()
        self.noted.append((index.where, index.value))
        return index.value

    def find(self, args, kwargs):
        """The declared cache among a call's arguments and its entries, or (None, None)."""
        found = [(leaf, layers) for leaf in pytree.tree_leaves((args, kwargs))
                 if not isinstance(leaf, (torch.Tensor, *CONSTANTS))
                 and (layers := self.layers_of(leaf)) is not None]
        if len(found) > 1:
            raise Unsupported("its inputs include several caches")
        return found[0] if found else (None, None)

    def entry_for(self, modules: list, recorded: tuple, args, kwargs):
        """The entry the block of `modules` would write, if it starts as the recorded block's
        (`recorded`: Traced.cache) did; else None (the call is traced)."""
        where, before, _ = recorded
        index = modules[where[0]].__dict__.get(where[1])
        try:
            _, layers = self.find(args, kwargs)
        except Unsupported:
            return None
        if layers is None or type(index) is not int or not 0 <= index < len(layers):
            return None
        entry = layers[index]
        try:
            return entry if entry_state(type(entry), vars(entry), self.ledger) == before else None
        except Unsupported:
            return None

    def written(self, modules: list, layers: list, before: list, where):
        """The entry the traced block of `modules` wrote: (where its layer index is, the
        entry's index), or None where it wrote none. `before`: EntryBefore of each entry;
        `where`: as recorded, else the index it handed the cache's update (noted)."""
        if len(layers) != len(before):
            raise Unsupported("entries it adds to a cache")
        changed = [k for k, (e, was) in enumerate(zip(layers, before))
                   if not unchanged(e, was.refs)]
        if not changed:
            return None
        if where is None:
            noted = self.noted or []
            if len(noted) != 1:
                raise Unsupported("a cache entry it did not find by its layer index")
            where = noted[0][0]
        index = modules[where[0]].__dict__.get(where[1])
        if changed != [index]:
            raise Unsupported("a cache entry other than its own")
        return where, index

    def effect(self, layers: list, before: list, written: tuple, ops, slot_of) -> tuple:
        """(where its layer index is, the entry's state before, after): what a replayed block
        writes (the tensors it held that the block freed, by place)."""
        where, index = written
        was = before[index]
        if isinstance(was.state, str):
            raise Unsupported(was.state)
        freed = {was.tensors[op[1][1]][0] for op in ops
                 if op[0] == "free" and op[1][0] == "entry"}
        return (where, was.state, entry_state(type(layers[index]), vars(layers[index]),
                                              self.ledger, slot_of, was.refs, freed))


def write_entry(entry, rec, fwd_rids: list[int], make_tensor, bases: dict, held: list) -> None:
    """A replayed block's cache entry, as the recorded block (`rec`: Traced) left its own: its
    new tensors on the replayed storages (`held` until the backward where autograd saved them
    too)."""
    _, before, after = rec.cache
    kept = {part[0] for part in after[1]}
    for part in before[1]:
        if part[0] not in kept:
            delattr(entry, part[0])
    for part in after[1]:
        if part[1] == "new":
            t = make_tensor(part[3], fwd_rids[part[2]], bases)
            if part[4] is not None:
                give_values(t, part[4])
            setattr(entry, part[0], t)
            if part[2] in rec.cache_saved:
                held.append(t)
        elif part[1] == "value":
            setattr(entry, part[0], part[2])


class _Other:
    """An attribute that is neither a tensor nor a constant, by identity (not kept alive)."""

    def __init__(self, value):
        self.id = id(value)


def entry_refs(entry) -> dict[str, Any]:
    """An entry's attributes before a call, without keeping them alive (a tensor kept here
    would be freed later than in the script): tensors by weak reference, constants by value,
    anything else by identity."""
    return {name: weakref.ref(v) if isinstance(v, torch.Tensor)
            else v if isinstance(v, CONSTANTS) else _Other(v)
            for name, v in vars(entry).items()}


def unchanged(entry, refs: dict[str, Any]) -> bool:
    now = vars(entry)
    return now.keys() == refs.keys() and all(_same(now[name], ref) for name, ref in refs.items())


def _same(value, ref) -> bool:
    if isinstance(ref, weakref.ref):
        return ref() is value
    if isinstance(ref, _Other):
        return id(value) == ref.id
    return value is ref


def entry_tensors(entry, ledger) -> list[tuple[str, int | None]]:
    """(name, record) of the tensors an entry holds, by name."""
    return [(name, rid_of(ledger, v)) for name, v in sorted(vars(entry).items())
            if isinstance(v, torch.Tensor)]


class EntryBefore:
    """An entry as a traced call found it: its attributes (not kept alive), its state as
    metadata (or why it has none) and its tensors' records."""

    def __init__(self, entry, ledger):
        self.refs = entry_refs(entry)
        self.tensors = entry_tensors(entry, ledger)
        try:
            self.state = entry_state(type(entry), vars(entry), ledger)
        except Unsupported as e:
            self.state = str(e)


def entry_state(cls: type, attributes: dict[str, Any], ledger, new: dict[int, int] | None = None,
                before: dict[str, Any] | None = None, freed: set[str] = frozenset()) -> tuple:
    """An entry's class and attributes as metadata: a tensor by its metadata, and, after the
    call (`new`: rid -> slot of the block's allocations; `before`: entry_refs() before it), by
    the slot it was allocated in, or as the one it held before; anything else by value.
    `freed`: the names of the tensors it held that the call freed (the keys a decode step
    concatenates onto). A tensor it let go of otherwise is kept by something else, which a
    replay would not know: not replayed. A new one with values known to the trace (a window
    size) carries them, up to ENTRY_VALUES elements; a replay writes them too. The messages
    start with "it": they are about this call, and a later pass may be replayed."""
    if new is not None and before is not None:
        for name, ref in before.items():
            if isinstance(ref, weakref.ref) and name not in freed and \
                    not any(v is ref() for v in attributes.values()):
                raise Unsupported("it lets go of a tensor its cache entry held")
    parts = []
    for name, value in sorted(attributes.items()):
        if isinstance(value, torch.Tensor):
            if new is None:
                parts.append((name, "tensor", tensor_meta(value)))
            elif before is not None and isinstance(before.get(name), weakref.ref) \
                    and before[name]() is value:
                parts.append((name, "same"))
            else:
                k = new.get(rid_of(ledger, value))
                if k is None:
                    raise Unsupported("it keeps memory from outside the block in its cache "
                                      "entry")
                values = small_values(value, ENTRY_VALUES) if has_values(value) else None
                if values is None and has_values(value):
                    raise Unsupported("it keeps more values in its cache entry than a replay "
                                      "writes")
                parts.append((name, "new", k, tensor_meta(value), values))
        elif isinstance(value, CONSTANTS):
            parts.append((name, "value", value))
        else:
            raise Unsupported(f"it keeps a {type(value).__name__} in its cache entry")
    return (cls, tuple(parts))
