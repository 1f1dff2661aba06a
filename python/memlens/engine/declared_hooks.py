"""Gradient hooks a library's plugin declares to layer replay (engine/layer_replay.py).

A library's hook on a parameter's gradient accumulator (Megatron's DDP: add the gradient to
`main_grad`, drop `param.grad`, mark the parameter ready for its bucket's reduction) runs in
C++'s AccumulateGrad, where no hook can be seen. A plugin that knows it declares it
(`LayerReplay.gradient_hook`): while a block's backward is recorded, each call is noted in
place among the block's operations, with the gradient the parameter held, and what the hook
does is not recorded; a replayed block calls its own parameter's hook at that place, on its
own gradient, so what the hook does (frees, collectives) happens as in a full trace. A
distributed job replays only where every parameter of its blocks has its hook declared."""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from .layer_tape import rid_of, tensor_meta


class DeclaredHooks:
    def __init__(self, ledger, accountant, counts: Callable[[], tuple], counted: int):
        self.ledger = ledger
        self.accountant = accountant
        self._counts = counts  # LayerReplay.counts: what a replay cannot do again
        self._counted = counted  # how many of its items are counts
        self._hooks: dict[int, tuple] = {}  # id(parameter) -> (weakref, its hook)
        self._gradients: dict[int, Any] = {}  # rid -> weakref to the storage a hook was given
        self._recorded: dict[int, int] | None = None  # id(parameter) -> index, while recorded
        self.by_hooks: list[int] = []  # what the hooks added to the counts while recorded

    def declare(self, param: torch.Tensor, hook: Callable[[], None]):
        """`hook`, which reads none of its arguments, as the hook to register instead."""
        self._hooks[id(param)] = (weakref.ref(param), hook)

        def declared_hook(*unused):
            self._run(param, hook)

        return declared_hook

    def hook_of(self, param: torch.Tensor):
        """The hook declared for `param`, or None."""
        entry = self._hooks.get(id(param))
        return entry[1] if entry is not None and entry[0]() is param else None

    # -- while a block's backward is recorded ----------------------------------------------
    def record(self, params: list[torch.Tensor] | None) -> None:
        """A block's backward is recorded with these parameters (None: it ended)."""
        self._recorded = None if params is None else {id(p): j for j, p in enumerate(params)}
        self.by_hooks = [0] * self._counted

    def _run(self, param: torch.Tensor, hook) -> None:
        ledger = self.ledger
        tap = ledger.tap
        if tap is None:
            hook()
            return
        j = None if self._recorded is None else self._recorded.get(id(param))
        if j is None:
            tap.append(("unsupported", "a gradient hook of a parameter outside it"))
            hook()
            return
        counts = self._counts()  # what the hook does, a replay does again: not the block's
        grad = param.grad
        rid = rid_of(ledger, grad)
        tap.append(("hook", j, rid, None if grad is None else tensor_meta(grad)))
        if rid is not None:  # a buffer outside the block, maybe: kept by its storage
            self._gradients[rid] = weakref.ref(grad.untyped_storage())
        del grad
        ledger.tap = None
        try:
            hook()
        finally:
            ledger.tap = tap
            self.by_hooks = [n + after - before for n, after, before
                             in zip(self.by_hooks, self._counts(), counts)]

    # -- in a replayed block ---------------------------------------------------------------
    def gradient_outside(self, rid: int, meta) -> torch.Tensor | None:
        """A tensor of `meta` on the storage of record `rid`, which a recorded block's
        parameter had as its gradient when its hook ran: a buffer outside the block (TE's
        dummy weight gradient, given to every layer's parameters). None if it is gone."""
        ref = self._gradients.get(rid)
        storage = ref() if ref is not None else None
        if storage is None or self.ledger.storage_rid(storage) != rid:
            return None
        shape, stride, offset, dtype, device, _, _ = meta
        with self.accountant.unbooked():
            return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape,
                                                                    stride)
