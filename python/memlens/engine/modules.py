"""Which module each allocation belongs to, in forward and in backward.

Forward: global forward pre/post hooks keep a stack of the modules being called.
Backward: when a module's forward returns, the autograd nodes it created are labelled with the
module (innermost module first, since inner modules return first). During backward the
accountant asks autograd which node is running (`torch._C._current_autograd_node`) and reads its
label. Activation-checkpoint recomputation re-enters forward hooks, so the forward stack wins
when it is not empty.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch import nn

from .class_source import class_source
from .stacks import StackTable

_LABEL = "memlens.module"
_current_node = torch._C._current_autograd_node
_compiling = torch.compiler.is_compiling
# Set on the graphs a compiled region runs (engine/compiled.py): their calls are the region's,
# not modules of the script's (a compiled function's graph would pass for the model).
COMPILED_GRAPH = "_memlens_compiled_graph"


def compiled_graph(graph: nn.Module) -> nn.Module:
    setattr(graph, COMPILED_GRAPH, True)
    return graph


class ModuleInfo:
    __slots__ = ("index", "ref", "cls", "call_ancestors", "constructed_at", "registered")

    def __init__(self, index: int, module: nn.Module):
        self.index = index
        # Weak: a module the script drops (say, the prototype layer nn.TransformerEncoder
        # deep-copies) must be freed, with its parameters, as in a real run.
        self.ref = weakref.ref(module)
        self.cls = type(module)
        self.call_ancestors: frozenset[int] = frozenset()
        self.constructed_at: tuple[str, int] | None = None  # where the parent assigned it
        self.registered = False  # some module holds it as a submodule
        # Now, while the class's module is importable: a class of the traced script lives in
        # runpy's temporary `__main__`, gone (sys.modules["__main__"] is memlens') once the
        # script has ended and the snapshot is built.
        class_source(self.cls)

    @property
    def module(self) -> nn.Module | None:
        return self.ref()

    @property
    def class_name(self) -> str:
        return self.cls.__name__

    @property
    def source(self) -> tuple[str, int] | None:
        """File and line of the module's class definition."""
        return class_source(self.cls)


def _tensors(obj: Any, limit: int = 64):
    """Tensors directly inside a module's inputs or outputs (one level of containers)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj[:limit]:
            if isinstance(item, torch.Tensor):
                yield item
    elif isinstance(obj, dict):
        for item in list(obj.values())[:limit]:
            if isinstance(item, torch.Tensor):
                yield item
    elif hasattr(obj, "to_tuple"):  # transformers' ModelOutput
        yield from _tensors(obj.to_tuple(), limit)


class ModuleTracker:
    def __init__(self, stacks: StackTable, on_top_level_forward: Callable[[nn.Module], None]):
        self.stacks = stacks
        self.infos: list[ModuleInfo] = []
        self._index: dict[int, int] = {}  # id(module) -> index (while the module lives)
        self.stack: list[int] = []
        self._stops: list[frozenset] = []  # input grad_fns of each module on the stack
        self.top_level: list[int] = []  # modules called with an empty stack, in order
        # Names inside each top-level module, recorded when it is called (modules may be gone
        # by the time the snapshot is built): module index -> (top-level index, dotted name).
        self.names: dict[int, tuple[int, str]] = {}
        self.has_parameters: set[int] = set()  # top-level modules that own parameters
        self.param_owner: dict[int, int] = {}  # id(parameter) -> module index
        self._on_top_level_forward = on_top_level_forward
        self._handles: list[Any] = []

    # -- lifecycle -------------------------------------------------------------------------
    def install(self) -> None:
        from torch.nn.modules import module as m

        self._handles = [
            m.register_module_forward_pre_hook(self.pre_forward),
            m.register_module_forward_hook(self.post_forward, always_call=True),
            m.register_module_module_registration_hook(self._submodule_registered),
        ]

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- lookup ----------------------------------------------------------------------------
    def index_of(self, module: nn.Module) -> int:
        key = id(module)
        idx = self._index.get(key)
        if idx is None or self.infos[idx].ref() is not module:  # new, or an id reused
            idx = self._index[key] = len(self.infos)
            self.infos.append(ModuleInfo(idx, module))
        return idx

    def current(self) -> int:
        """The module an allocation made right now belongs to (-1: none)."""
        if self.stack:
            return self.stack[-1]
        node = _current_node()
        if node is not None:
            return node.metadata.get(_LABEL, -1)
        return -1

    def adopt_parameters(self, root: nn.Module) -> None:
        """Remember which module directly owns each parameter (first owner wins when shared).
        An owner no longer in the model hands its parameters on: a module swap
        (`convert_to_float8_training` puts a Float8Linear in each Linear's place, with the
        Linear's weight) makes the new module their owner."""
        in_model = {self.index_of(mod) for mod in root.modules()}
        for mod in root.modules():
            idx = self.index_of(mod)
            for p in mod._parameters.values():
                if p is not None and self.param_owner.get(id(p), idx) not in in_model:
                    self.param_owner[id(p)] = idx
                elif p is not None:
                    self.param_owner.setdefault(id(p), idx)

    def _record_names(self, root: int, module: nn.Module) -> None:
        for name, mod in module.named_modules():
            self.names.setdefault(self.index_of(mod), (root, name))
        if next(module.parameters(), None) is not None:
            self.has_parameters.add(root)

    # -- hooks -----------------------------------------------------------------------------
    def _submodule_registered(self, parent: nn.Module, name: str, sub: nn.Module | None):
        if sub is not None:
            info = self.infos[self.index_of(sub)]
            info.registered = True
            if info.constructed_at is None:
                top = self.stacks.top_frame(self.stacks.capture())
                if top is not None:
                    info.constructed_at = (top[0], top[1])
        return None

    def pre_forward(self, module: nn.Module, args: Any) -> None:
        # Dynamo traces hooks into the graph: a compiled region is one call
        if _compiling() or getattr(module, COMPILED_GRAPH, False):
            return
        idx = self.index_of(module)
        info = self.infos[idx]
        if not self.stack:
            if _current_node() is None:  # not a recomputation inside backward
                if idx not in self.top_level:
                    self.top_level.append(idx)
                self._record_names(idx, module)
                self._on_top_level_forward(module)
        elif idx not in self.names and not info.registered:
            # Made on the fly inside another module's forward and held by no model (Megatron's
            # softmax makes a new nn.Softmax per call): part of its caller.
            idx = self.stack[-1]
        elif not info.call_ancestors:
            info.call_ancestors = frozenset(self.stack)
        self.stack.append(idx)
        self._stops.append(frozenset(t.grad_fn for t in _tensors(args) if t.grad_fn is not None))

    def post_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        # _compiling() first: Dynamo traces this hook into each compiled block, and reading
        # the stack there would guard the graph on its contents (which blocks are open), so
        # each of torchtitan's identical blocks recompiled
        if _compiling() or not self.stack or getattr(module, COMPILED_GRAPH, False):
            return
        idx = self.stack.pop()
        stops = self._stops.pop()
        if torch.is_grad_enabled() and _current_node() is None:
            self._label_graph(idx, output, stops)

    def _label_graph(self, idx: int, output: Any, stops: frozenset) -> None:
        todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        seen: set = set()
        infos = self.infos
        while todo:
            node = todo.pop()
            if node in seen or node in stops:
                continue
            seen.add(node)
            meta = node.metadata
            owner = meta.get(_LABEL)
            if owner is None:
                variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf
                if variable is not None:
                    meta[_LABEL] = self.param_owner.get(id(variable), idx)
                    continue
                meta[_LABEL] = idx
            elif owner != idx and idx not in infos[owner].call_ancestors:
                continue  # made by a module outside this one: stop here
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    todo.append(nxt)
