"""Decides each storage's category from what holds it.

Allocations start with a category from their context (see `Accountant._context`); this module
moves them to what they turn out to be:
- a registered parameter or buffer -> parameter / buffer (also re-checked at every top-level
  forward, which catches `.to(dtype)` and `.cuda()` swapping the data);
- a parameter's `.grad` after accumulation -> gradient;
- a tensor held in `optimizer.state` after a step -> optimizer state;
- a temporary saved for backward (saved-tensor pack hook, or selective checkpointing's cache,
  patches/torch_checkpoint.py) -> activation.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .. import categories as C


def _storages_of(t: torch.Tensor):
    """The storages that hold a tensor's bytes: its own, or for a wrapper subclass (DTensor,
    whose storage is a shell of the global size) those of its inner tensors (the local shard)."""
    if is_traceable_wrapper_subclass(t):
        for attr in t.__tensor_flatten__()[0]:
            inner = getattr(t, attr)
            if isinstance(inner, torch.Tensor):  # DTensor also lists its DeviceMesh
                yield from _storages_of(inner)
        return
    try:
        yield t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return


class Classifier:
    def __init__(self, ledger, modules):
        self.ledger = ledger
        self.modules = modules
        self._handles: list[Any] = []
        self._grad_hooked: set[int] = set()
        self._param_handles: list[Any] = []
        self._pinned: set[int] = set()  # records whose category and module are settled
        self.saved_hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self._unpack)
        self.on_pack = None  # called with each tensor saved (engine/layer_replay.py)
        self._saved_leaves: dict[Any, weakref.ref] = {}  # alias key -> a saved leaf

    def install(self) -> None:
        from torch.nn.modules import module as m
        from torch.optim import optimizer as o

        self._handles = [
            m.register_module_parameter_registration_hook(self._parameter_registered),
            m.register_module_buffer_registration_hook(self._buffer_registered),
            o.register_optimizer_step_pre_hook(self._before_step),
            o.register_optimizer_step_post_hook(self._after_step),
            m.register_module_forward_hook(self.module_returned),
        ]
        self.saved_hooks.__enter__()

    def uninstall(self) -> None:
        self.saved_hooks.__exit__(None, None, None)
        for h in self._handles + self._param_handles:
            h.remove()
        self._handles, self._param_handles = [], []

    # -- helpers ---------------------------------------------------------------------------
    def mark(self, t: torch.Tensor | None, category: int, module: int | None = None,
             only_from: tuple[int, ...] | None = None, sub: int = C.SUB_NONE) -> None:
        """A parameter held in an FP8 dtype (an FSDP all-gather of FP8 weights, unsharded), or
        already marked an FP8 weight or scale, stays in the FP8 subcategory whoever marks it."""
        if not isinstance(t, torch.Tensor):
            return
        for st in _storages_of(t):
            rid = self.ledger.storage_rid(st)
            if rid is None or rid in self._pinned:
                continue
            rec = self.ledger.records[rid]
            if only_from is not None and rec.category not in only_from:
                continue
            fp8 = category == C.PARAMETER and (rec.dtype.startswith("float8")
                                               or rec.sub == C.SUB_FP8)
            self.ledger.recategorize(rid, category, module, C.SUB_FP8 if fp8 else sub)

    def mark_fp8(self, t: torch.Tensor | None, module: int | None = None) -> None:
        """`t` (its storages: a subclass's inner data and scale) is an FP8 copy of a weight or
        a weight's scale: a parameter, in the "fp8 weights/scales" subcategory, for good (a
        copy saved for backward stays one; FSDP's marks of its unsharded parameters agree)."""
        self.mark(t, C.PARAMETER, module, sub=C.SUB_FP8)

    def pin(self, t: torch.Tensor, category: int, module: int | None = None) -> None:
        """`t`'s storage is `category` for good: a buffer shared by many parameters (a
        library's flat gradient buffer) must not take the category or module of whichever
        view of it is looked at next."""
        self.mark(t, category, module)
        for st in _storages_of(t):
            rid = self.ledger.storage_rid(st)
            if rid is not None:
                self._pinned.add(rid)

    def _hook_gradient(self, p: nn.Parameter) -> None:
        # Not a leaf: a view standing in for a parameter (FSDP1's use_orig_params views of
        # its flat parameter); its gradient lands on the leaf it views, hooked on its own.
        if id(p) in self._grad_hooked or not p.requires_grad or not p.is_leaf:
            return
        self._grad_hooked.add(id(p))
        self._param_handles.append(p.register_post_accumulate_grad_hook(self._grad_accumulated))

    # -- model state -----------------------------------------------------------------------
    def _parameter_registered(self, module: nn.Module, name: str, param):
        if param is not None:
            # A tied weight keeps the module that registered it first.
            owner = self.modules.param_owner.setdefault(id(param), self.modules.index_of(module))
            self.mark(param, C.PARAMETER, owner)
            self._hook_gradient(param)
        return None

    def _buffer_registered(self, module: nn.Module, name: str, buffer):
        if buffer is not None:
            self.mark(buffer, C.BUFFER, self.modules.index_of(module))
        return None

    def scan_model(self, root: nn.Module) -> None:
        """Re-classify a model's parameters and buffers (their data may have been replaced)."""
        self.modules.adopt_parameters(root)
        for mod in root.modules():
            idx = self.modules.index_of(mod)
            for p in mod._parameters.values():
                if p is not None:
                    owner = self.modules.param_owner.get(id(p), idx)
                    self.mark(p, C.PARAMETER, owner)
                    self._hook_gradient(p)
                    if p.grad is not None:
                        self.mark(p.grad, C.GRADIENT, owner)
            for b in mod._buffers.values():
                if b is not None:
                    self.mark(b, C.BUFFER, idx)

    def module_returned(self, module: nn.Module, args, output) -> None:
        """What a module holds as its parameters while it runs is a parameter, even when it
        was put there without registration: FSDP swaps in unsharded parameters (views of its
        all-gather outputs) with a plain assignment to `_parameters` before forward and frees
        them after (global hooks run before FSDP's own, so they are still there)."""
        if torch.compiler.is_compiling():  # inside a compiled region: it runs as one call
            return None
        idx = -1
        for p in module._parameters.values():
            if p is None:
                continue
            if idx < 0:
                idx = self.modules.index_of(module)
            # Saved for backward by the layer before its hook ran: a parameter all the same.
            self.mark(p, C.PARAMETER, self.modules.param_owner.setdefault(id(p), idx),
                      only_from=(C.TEMPORARY, C.ACTIVATION))
            self._hook_gradient(p)
        return None

    @property
    def gradient_hook(self):
        """The post-accumulate-grad hook on every parameter (layer replay tells it apart)."""
        return self._grad_accumulated

    def _grad_accumulated(self, p: torch.Tensor) -> None:
        self.mark(p.grad, C.GRADIENT, self.modules.param_owner.get(id(p)))

    # -- optimizer -------------------------------------------------------------------------
    def _before_step(self, optimizer, args, kwargs) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if getattr(p, "grad", None) is not None:
                    self.mark(p.grad, C.GRADIENT, self.modules.param_owner.get(id(p)))

    def _after_step(self, optimizer, args, kwargs) -> None:
        # A step given a closure (Lightning) makes the gradients inside it, after the pre-hook.
        self._before_step(optimizer, args, kwargs)
        for p, state in optimizer.state.items():
            owner = self.modules.param_owner.get(id(p))
            for value in _state_tensors(state):
                self.mark(value, C.OPTIMIZER_STATE, owner, only_from=(C.TEMPORARY, C.INPUT, C.OTHER))

    # -- activations -----------------------------------------------------------------------
    def mark_saved(self, t: torch.Tensor) -> None:
        """`t` is held for backward, by autograd or by another mechanism (selective
        checkpointing's cache): an activation, whichever saved it."""
        self.mark(t, C.ACTIVATION, only_from=(C.TEMPORARY,))

    def saved_by_autograd(self, t: torch.Tensor) -> None:
        """`t` is saved for backward by an autograd node, with or without the pack hook."""
        self.mark_saved(t)
        if self.on_pack is not None:
            self.on_pack(t)

    def pack(self, t: torch.Tensor):
        """The saved-tensor pack hook (public: code that saves without it recognises it)."""
        self.saved_by_autograd(t)
        if t.grad_fn is None:  # a leaf or a tensor outside autograd: no cycle possible
            return t
        # A detached alias: returning `t` itself would make a saved output reference its own
        # autograd node, a cycle through C++ that is never collected.
        return t.detach()

    def _unpack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch.Tensor) and t.grad_fn is None and t.requires_grad:
            key = _alias_key(t)  # what autograd's alias of it will share (original_of_saved)
            if key is not None:
                self._saved_leaves[key] = weakref.ref(t)
        return t

    def original_of_saved(self, t):
        """The leaf a saved tensor stands for. With any saved-tensor hooks installed (ours
        are, always), autograd hands a custom Function's backward a new alias of each saved
        leaf (a parameter) instead of the leaf itself, so the attributes a library keeps on
        its parameters are gone (DeepSpeed ZeRO-3's `ds_status` on the LM head TRL's chunked
        log-prob gathers in backward). Without hooks, as in a real run, it is the leaf."""
        if not isinstance(t, torch.Tensor) or t.grad_fn is not None or not t.requires_grad:
            return t
        # Keyed when unpacked (`_unpack`): the alias autograd makes of it then shares its
        # storage, which may not be the one it had when saved (ZeRO-3 releases a gathered
        # parameter after its forward; a real backward sees the leaf as it is now).
        ref = self._saved_leaves.get(_alias_key(t))
        original = ref() if ref is not None else None
        return t if original is None else original


def _alias_key(t: torch.Tensor):
    """What a tensor and its aliases share: storage, offset, shape, strides, dtype."""
    try:
        return (t.untyped_storage()._cdata, t.storage_offset(), tuple(t.shape), t.stride(),
                t.dtype)
    except (RuntimeError, NotImplementedError, TypeError):  # no storage (a wrapper subclass)
        return None


def _state_tensors(state: Any):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for v in state.values():
            yield from _state_tensors(v)
    elif isinstance(state, (list, tuple)):
        for v in state:
            yield from _state_tensors(v)
