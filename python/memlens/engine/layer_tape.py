"""A block's ledger operations, relative to the block (engine/layer_replay.py): what they
refer to by place instead of record id, what a call must share with the recorded one, and what
one traced forward or backward did."""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from .layer_groups import PLAIN, structure
from .shadow_values import SHADOW, shadow_of

CONSTANTS = (type(None), bool, int, float, str, torch.dtype, torch.device)


class Unsupported(Exception):
    """What a block does that a recording relative to the block cannot express."""


def rid_of(ledger, t) -> int | None:
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return ledger.storage_rid(t.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


def tensor_meta(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device,
            t.requires_grad, t.untyped_storage().nbytes())


def tensors(tree) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


# -- a block's operations, relative to the block -----------------------------------------

class Slots:
    """What a block's operations refer to, by place instead of record id: its inputs' storages
    ("in", j), its parameters' and their gradients' ("param", j), ("pgrad", j), the gradient of
    its output ("gout", 0), its forward's allocations ("fwd", k), and the allocations of the
    operations themselves ("new", k)."""

    def __init__(self, ledger, modules: dict[int, int]):
        self.ledger = ledger
        self.modules = modules  # module index -> position among the block's modules
        self.known: dict[int, tuple] = {}

    def bind(self, kind: str, rids) -> None:
        for j, rid in enumerate(rids):
            if rid is not None:
                self.known.setdefault(rid, (kind, j))

    def normalize(self, raw: list[tuple], first_use: set[int] = frozenset()
                  ) -> tuple[list[tuple], list[int], dict[int, tuple]]:
        """(the operations with slots and relative modules, the new rids, rid -> slot).
        `first_use`: records a library takes once and keeps (a cuBLAS workspace, the first
        backward matmul's on autograd's thread): not the block's, left out."""
        new: list[int] = []
        out: list[tuple] = []
        known = dict(self.known)
        records = self.ledger.records
        works: dict[int, int] = {}  # id(NCCL work) -> its index among the block's
        waiting: set[int] = set()
        for op in raw:
            if op[0] == "nccl":
                out.append(_collective(op, works, waiting))
                continue
            if op[0] == "hook":  # a declared gradient hook (declared_hooks.py)
                # its parameter's gradient: the block's, or a buffer outside it (TE's dummy
                # weight gradient, which every layer's parameters are given)
                grad = None if op[2] is None else known.get(op[2], ("outside", op[2]))
                out.append(("hook", op[1], grad, op[3]))
                continue
            if op[0] == "unsupported":
                raise Unsupported(op[1])
            if op[1] in first_use:
                continue
            if op[0] == "alloc":
                rec = records[op[1]]
                known[op[1]] = ("new", len(new))
                new.append(op[1])
                out.append(("alloc", rec.nbytes, rec.device, rec.dtype, rec.shape, op[2],
                            self._module(op[3]), rec.op, rec.stack, rec.stream, rec.backward,
                            op[4]))
            elif op[0] == "free":
                out.append(("free", self._slot(known, op[1])))
            elif op[0] == "cat":
                out.append(("cat", self._slot(known, op[1]), op[2], self._module(op[3]), op[4]))
            else:
                raise Unsupported(f"the ledger's {op[0]}")
        if waiting:
            raise Unsupported("a collective it does not wait for")
        return out, new, known

    @staticmethod
    def _slot(known, rid):
        slot = known.get(rid)
        if slot is None:
            raise Unsupported("memory from outside the block")
        return slot

    def _module(self, module):
        if module is None or module < 0:
            return module
        rel = self.modules.get(module)
        return ("m", rel) if rel is not None else module


def _collective(op: tuple, works: dict[int, int], waiting: set[int]) -> tuple:
    """A collective's entry (kernels/nccl_work.py `_tape`), its work named by its index among
    the block's: a wait for a work issued outside the block cannot be replayed."""
    kind = op[1]
    if kind == "unsupported":
        raise Unsupported(op[2])
    if kind == "async":
        k = works[id(op[4])] = len(works)
        waiting.add(k)
        return ("nccl", "async", op[2], op[3])
    if kind == "wait":
        k = works.get(id(op[2]))
        if k is None:
            raise Unsupported("a wait for a collective issued before it")
        waiting.discard(k)
        return ("nccl", "wait", k)
    return op


def autocast_on(device: str) -> bool:
    """Autocast is on for the device type of a record's device ("cuda:0", "cpu")."""
    return torch.is_autocast_enabled(device.partition(":")[0])


def has_values(t: torch.Tensor) -> bool:
    return hasattr(t, SHADOW) or getattr(t, "constant", None) is not None


def signature(block, own_hook, args, kwargs, cache_layers=lambda obj: None) -> tuple | str:
    """What a call must share with the recorded one: the block's structure now (parameters
    frozen or cast since, hooks added, train or eval), the inputs' structure, constants and
    tensor metadata, and the autograd and autocast state. A string: why a call is never
    replayed. `cache_layers`: the entries of a cache a library declared (layer_cache.py), the
    one object a block may be handed; None for any other object."""
    shape = structure(block, own_hook, calling=True)
    if shape is None:
        return "it has hooks of its own now"
    leaves, spec = pytree.tree_flatten((args, kwargs))
    parts = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if type(leaf) not in PLAIN or leaf.layout != torch.strided:
                return "its inputs include a tensor subclass"
            # Values known to the trace (positions made from host data, shadow_values.py)
            # may decide sizes: the same values, not only the same shape.
            valued = _values(leaf) if has_values(leaf) else None
            parts.append((type(leaf), tensor_meta(leaf), valued))
        elif isinstance(leaf, CONSTANTS):
            parts.append((type(leaf), leaf))
        elif cache_layers(leaf) is not None:
            parts.append((type(leaf), "cache"))
        else:  # an object the block may change: not provably the same program
            return f"its inputs include a {type(leaf).__name__}, which it may change"
    return (torch.is_grad_enabled(), shape, str(spec), tuple(parts),
            torch.is_inference_mode_enabled(),
            torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
            torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            _attention_backends())


def _attention_backends() -> tuple:
    """What decides which attention kernel a block's SDPA runs (and so what it keeps): a
    recording kept across passes must not serve a pass under another `sdpa_kernel`."""
    c = torch._C
    return (tuple(c._get_sdp_priority_order()), c._get_flash_sdp_enabled(),
            c._get_mem_efficient_sdp_enabled(), c._get_math_sdp_enabled(),
            c._get_cudnn_sdp_enabled(), torch.are_deterministic_algorithms_enabled())


def _values(t: torch.Tensor) -> tuple:
    """A tensor's values (a real host tensor's), compared between calls: outside the trace's
    modes, which would book the copy of a strided one (an expanded mask)."""
    real = shadow_of(t)
    with _disable_current_modes():
        flat = real.contiguous().reshape(-1).view(torch.uint8)
        return (real.dtype, tuple(real.shape), flat.numpy().tobytes())


class Traced:
    """What one fully traced call of a block did, relative to it."""

    # the cache entry it wrote (where its layer index is, the entry's state before and after;
    # layer_cache.py), and the entry's "new" slots autograd saved too
    cache: tuple | None = None
    cache_saved: tuple = ()
    rng_states: tuple = ()  # "new" slots of RNG states activation checkpointing keeps

    def __init__(self, signature, ops, new, outputs, held_inputs, held_outputs, alive,
                 in_rids, sdpa, casts):
        self.signature = signature
        self.ops = ops
        self.new = new  # rids of its allocations, in order
        self.outputs = outputs  # (treespec, [("tensor", k, meta) | ("constant", value)])
        self.held_inputs = held_inputs  # inputs autograd keeps (saved for backward)
        self.held_outputs = held_outputs  # output leaves autograd keeps
        self.alive = alive  # "new" slots alive after forward, outputs aside
        self.in_rids = in_rids
        self.sdpa = sdpa  # attention calls it made, per kernel (the snapshot counts them)
        # "new" slots of the weight casts autocast caches, and of those only its cache keeps
        self.casts, self.cached = casts

    def shape(self) -> tuple:
        return (self.signature, self.ops, str(self.outputs[0]), self.outputs[1],
                self.held_inputs, self.held_outputs, self.alive, self.sdpa, self.casts,
                self.cached, self.cache, self.cache_saved, self.rng_states)


class Backward:
    """A traced block's backward, relative to it."""

    sdpa: tuple = ()  # attention calls it made (a checkpointed block's recompute)

    def __init__(self, ops, grad_input, grad_input_meta, param_grads, grads_before):
        self.ops = ops
        self.grad_input = grad_input  # slot of the gradient it hands the block before it
        self.grad_input_meta = grad_input_meta
        self.param_grads = param_grads  # per parameter: None, "kept" or (slot, meta)
        self.grads_before = grads_before  # which parameters held a gradient before

    def shape(self) -> tuple:
        return (self.ops, self.grad_input, self.param_grads, self.grads_before, self.sdpa)
