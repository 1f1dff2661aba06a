"""Repeated layers traced once: one block's ledger operations replayed for its identical
siblings, with the same snapshot as a full trace.

A transformer is N blocks of one class, called in order. Where the blocks are provably the same
program, the ledger operations of one block's forward (allocations, frees and category changes,
relative to the block) are recorded and replayed for the blocks after it, instead of
dispatching every op again. An autograd node stands for each replayed block and replays, in
backward, the operations recorded from a fully traced block's backward.

A pass over a group of N blocks (N >= MIN_BLOCKS) that has no recording yet, in forward:
  block 0      traced (what happens once: a library's first-use memory)
  block 1      traced and recorded
  2 .. N-3     replayed
  block N-2    traced, and compared with the recording
  block N-1    traced (the last block: its output's gradient may be unlike the others')
and in backward, which runs from the last block to the first:
  block N-1    traced (the first backward: first-use memory, the loss's gradient)
  block N-2    traced and recorded (its forward was traced, so its backward is real)
  N-3 .. 2     replayed
  block 1      traced, and compared with the recording
  block 0      traced.
The recordings are kept for the passes after it (each micro-batch, each step) that call the
blocks from the same place (layer_groups.Program). A pass whose recordings have matched a
traced block once replays blocks 1 to N-3 and still traces block N-2 to compare, forward and
backward, and compares blocks 0 and N-1 too (a backward of block N-2 unlike the recording is
recorded anew for the replays after it, which block 0's traced backward confirms, as block 1's
does in a first pass); once they have matched twice, it replays blocks
1 to N-2, and 0 and N-1 where those matched (layer_groups.Pass). A backward is recorded per
set of parameters that held a gradient before it (a micro-batch after the first adds to them).
A replay that a later comparison contradicts, or a script that fails after a replay, abandons
the replay: the caller runs the trace again in full (targets/session.py, cli/trace_command.py).

"Provably the same program": same class and submodule structure; parameters and buffers of the
same shapes, dtypes and strides; no hooks of their own (a library's hooks differ per block) and
no forward of their own; attributes equal (or helpers of one class holding equal values, no
tensor: layer_groups.differing_attributes), except those the forward never reads (read during
the recorded forward, it ends replay for the group) or a layer index it only hands to the
cache it is given; the same input metadata and constants, no object arguments but a cache a
library declared, of which each block writes its own entry (Hugging Face's KV cache:
layer_cache.py); no host values, streams or collectives; the block's own state unchanged by
its forward; and what autograd keeps, the same.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils.weak import WeakIdKeyDictionary

from .attribute_reads import AttributeReads
from .declared_hooks import DeclaredHooks
from .layer_backward import watch_backward
from .layer_cache import BlockCaches
from .layer_forward import trace_forward
from .layer_groups import (Group, Recorded, differing_attributes, find_groups, next_pass,
                           settled, _MISSING)
from .layer_tape import Traced, Unsupported, rid_of, signature, tensors
from .replayed_block import ReplayRun, ReplayedNode

_current_node = torch._C._current_autograd_node
_COUNTED = 6  # LayerReplay.counts(): how many of its items are counts
_top_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks


class LayerReplay:
    def __init__(self, tracer):
        self.tracer = tracer
        self.ledger = tracer.ledger
        self.groups: list[Group] = []
        self._scanned: set[int] = set()
        self._members: dict[int, tuple] = {}  # id(block) -> (weakref, group, index)
        self._wrapped: dict[type, Any] = {}  # class -> its own forward (or _MISSING)
        self.abandoned: str | None = None
        self.replayed = 0  # forward calls replayed
        self.replayed_backward = 0
        self.packed: set[int] | None = None  # saved for backward while a block is traced
        self.off: str | None = None  # why no blocks were looked for
        self.cast_runs: list[ReplayRun] = []  # replayed blocks with casts in autocast's cache
        self.caches = BlockCaches(self.ledger)  # caches a block may write its own entry of
        self.reads = AttributeReads(self.caches)
        self.hooks = DeclaredHooks(self.ledger, tracer.accountant, self.counts, _COUNTED)
        self._kept: list[Recorded] = []  # every backward recording kept (layer_backward.py)
        # a watched block's output -> (the hook that starts recording its backward, handle)
        self.backward_starts = WeakIdKeyDictionary()

    # -- lifecycle -----------------------------------------------------------------------
    def scan(self, root: nn.Module) -> None:
        """At a top-level forward: the model's groups of identical blocks, found once. In a
        distributed job, only where every parameter's gradient hooks are declared
        (`gradient_hook`): DDP's reducer, ZeRO and FSDP hook each parameter's gradient
        accumulator, in C++ or in Python, where no hook can be seen, and a replayed block's
        parameters would get their gradients without them."""
        if id(root) in self._scanned:
            return
        self._scanned.add(id(root))
        groups = find_groups(root, self.tracer.modules, self._own_hook)
        if torch.distributed.is_available() and torch.distributed.is_initialized() and any(
                p.requires_grad and self.hooks.hook_of(p) is None
                for g in groups for b in g.blocks for p in b.parameters()):
            self.off = "a distributed job whose gradient hooks memlens does not know (DDP's " \
                       "reducer, ZeRO, FSDP): they may wait for every parameter"
            return
        for group in groups:
            self.groups.append(group)
            for i, block in enumerate(group.blocks):
                self._members[id(block)] = (weakref.ref(block), group, i)
                self._wrap(type(block))

    def _wrap(self, cls: type) -> None:
        """A call of one of the groups' blocks reaches `_call` instead of its forward, for that
        call only: the blocks' class gets a `_call_impl` (what `Module.__call__` runs, hooks
        and all) that sets the block's `forward` for the call and takes it away after. The
        class's own `forward` stays as it is (Hugging Face's checkpointing wrapper checks that
        `type(layer).forward` is itself), and nothing stays on an instance for a copy
        (DataParallel's replicas, `copy.deepcopy`) to take along. Undone by `finish`."""
        if cls in self._wrapped:
            return
        own = cls.__dict__.get("_call_impl", _MISSING)
        call_impl = cls._call_impl
        members = self._members

        @functools.wraps(call_impl)
        def replaying_call_impl(module, *args, **kwargs):
            entry = members.get(id(module))
            if entry is None or entry[0]() is not module or "forward" in module.__dict__ \
                    or torch.compiler.is_compiling():
                return call_impl(module, *args, **kwargs)
            module.__dict__["forward"] = functools.partial(self._call, entry[1], entry[2],
                                                           module.forward)
            try:
                return call_impl(module, *args, **kwargs)
            finally:
                module.__dict__.pop("forward", None)

        self._wrapped[cls] = own
        cls._call_impl = replaying_call_impl

    def finish(self) -> None:
        """The trace ended: undo the classes' wrappers; replays never compared abandon it."""
        for cls, own in self._wrapped.items():
            if own is _MISSING:
                del cls._call_impl
            else:
                cls._call_impl = own
        self._wrapped, self._members = {}, {}
        self.reads.unwatch()
        self.cast_runs = []
        for group in self.groups:
            if group.unverified:
                self.abandon("the trace ended before a traced block was compared with the "
                             "replayed ones", raise_now=False)
        if any(r.pending for r in self._kept):
            self.abandon("the trace ended before a traced block's backward was compared with "
                         "the replayed ones'", raise_now=False)

    def abandon(self, why: str, raise_now: bool = True) -> None:
        if self.abandoned is None:
            self.abandoned = why
        if raise_now:
            from ..errors import LayerReplayAbandoned

            raise LayerReplayAbandoned(why)

    def meta(self) -> dict:
        return {"enabled": True, "groups": [{"module": self._name(g), "blocks": g.n,
                            **({"traced_in_full": g.disabled or g.declined}
                               if g.disabled or g.declined else {})}
                           for g in self.groups],
                "replayed_forward": self.replayed, "replayed_backward": self.replayed_backward,
                **({"off": self.off} if self.off else {})}

    def _name(self, group: Group) -> str:
        entry = self.tracer.modules.names.get(group.module_lists[0][0])
        return entry[1].rpartition(".")[0] if entry else type(group.blocks[0]).__name__

    # -- gradient hooks a plugin declares (declared_hooks.py) ----------------------------
    def gradient_hook(self, param: torch.Tensor, hook):
        """`hook`, which a library (Megatron's DDP) puts on `param`'s gradient accumulator and
        which reads none of its arguments, as the hook to register instead (declared_hooks.py):
        a replayed block calls it where the recorded block's ran."""
        return self.hooks.declare(param, hook)

    # -- a block's call ------------------------------------------------------------------
    def _call(self, group: Group, i: int, original, *args, **kwargs):
        if torch.compiler.is_compiling() or group.disabled or self.abandoned \
                or _current_node() is not None:
            return original(*args, **kwargs)
        if i == 0:
            if group.unverified:
                self.abandon("a pass ended before its last block was compared with the "
                             "replayed ones")
            group.next = 0
            group.pass_ = next_pass(group, self.tracer.stacks.place())
        if i != group.next:
            if group.unverified:
                self.abandon("the blocks of a group were called out of order")
            group.next = -1  # the rest of this pass is traced in full
            return original(*args, **kwargs)
        group.next = i + 1
        if _top_saved_hooks(False) != self._our_hooks():
            # Another library's saved-tensor hooks (activation checkpointing, offloading) keep
            # what the block saves: a replayed block would save nothing through them.
            group.declined = "it runs under another library's saved-tensor hooks (activation " \
                             "checkpointing, offloading)"
            return original(*args, **kwargs)
        mode, program = group.pass_.mode, group.pass_.program
        edge = i in (0, group.n - 1)
        if i == 1 and mode == "record":
            return self._record(group, i, original, args, kwargs)
        if i == group.n - 2 and mode != "trusted":
            return self._verify(group, i, original, args, kwargs)
        if edge and mode == "checked":
            return self._compare_edge(group, i, original, args, kwargs)
        rec = program.recording
        if (not edge or mode == "trusted" and program.edge_replayed(group, i)) and \
                rec is not None and \
                signature(group.blocks[i], self._own_hook, args, kwargs,
                          self.caches.layers_of) == rec.signature:
            entry = None if rec.cache is None else \
                self.caches.entry_for(list(group.blocks[i].modules()), rec.cache, args, kwargs)
            if rec.cache is None or entry is not None:
                return self._replay(group, i, rec, args, kwargs, entry)
        if i == 1:  # not the recorded program: recorded anew
            group.pass_.mode = "record"
            return self._record(group, i, original, args, kwargs)
        return original(*args, **kwargs)

    @property
    def _own_hook(self):
        return self.tracer.classifier.gradient_hook

    def _our_hooks(self):
        hooks = self.tracer.classifier.saved_hooks
        return (hooks.pack_hook, hooks.unpack_hook)

    def count_sdpa(self, counts: tuple) -> None:
        calls = self.tracer.sdpa.calls
        for kernel, n in counts:
            calls[kernel] = calls.get(kernel, 0) + n

    def sdpa_since(self, before: dict) -> tuple:
        """The attention calls made since `before`, per kernel (the snapshot counts them)."""
        return tuple(sorted((k, n - before.get(k, 0)) for k, n in self.tracer.sdpa.calls.items()
                            if n != before.get(k, 0)))

    def on_autocast_cleared(self) -> None:
        """The outermost autocast exited and its cache let go of the weight casts: a replayed
        block's casts go with it, those kept only by the cache now, those also saved for
        backward once its backward has run (before it, backward frees them)."""
        pending = []
        for run in self.cast_runs:
            free = run.rec.cached if not run.backward_done else run.rec.casts
            for k in free:
                self.ledger.free(run.fwd_rids[k])
            if not run.backward_done and run.rec.casts != run.rec.cached:
                pending.append(run)
        self.cast_runs = pending

    def on_pack(self, t: torch.Tensor) -> None:
        """The classifier's pack hook saw `t` saved for backward (while a block is recorded)."""
        if self.packed is not None:
            self.packed.add(rid_of(self.ledger, t))

    def _record(self, group: Group, i: int, original, args, kwargs):
        group.differing = differing_attributes(group.blocks)  # set since the scan too
        self.reads.watch(group, i)
        try:
            # A layer index read may be handed to the cache the block is given (layer_cache.py)
            self.caches.noted = [] if self.caches.find(args, kwargs)[1] is not None else None
        except Unsupported:
            self.caches.noted = None
        try:
            out, traced, problem, inputs = trace_forward(self, group, i, original, args, kwargs)
        finally:
            read = self.reads.unwatch()
            self.caches.noted = None
        if read:
            group.disabled = f"its forward reads {read}, which differs between the blocks"
        elif traced is None and problem and problem.startswith("it"):
            group.declined = problem  # this call's (signature()): another may be replayed
        elif problem:
            group.disabled = f"its forward makes {problem}"
        elif traced is not None:
            program = group.pass_.program
            if program.recording is not None and traced.shape() == program.recording.shape():
                program.checks += 1  # the program recorded before: its backwards hold
                program.state = settled(group.blocks[i])
            else:
                program.replace(traced, settled(group.blocks[i]))
            if not watch_backward(self, group, i, traced, out, inputs):
                program.replace(None)
        return out

    def keep(self, back) -> Recorded:
        """A backward recording kept for replays (layer_backward.py)."""
        recorded = Recorded(back)
        self._kept.append(recorded)
        return recorded

    def _verify(self, group: Group, i: int, original, args, kwargs):
        program = group.pass_.program
        rec = program.recording
        out, traced, problem, inputs = trace_forward(self, group, i, original, args, kwargs,
                                                   rec.cache[0] if rec and rec.cache else None)
        if rec is None:
            return out
        if traced is None or traced.shape() != rec.shape():
            if group.unverified:
                self.abandon("the last block's forward differs from the replayed ones'")
            program.replace(None)
            return out
        group.unverified = 0
        program.checks += 1
        watch_backward(self, group, i, traced, out, inputs)
        return out

    def _compare_edge(self, group: Group, i: int, original, args, kwargs):
        """Block 0 or N-1 in a checked pass: traced, and compared with the recording, forward
        and backward. Where both match, trusted passes replay it too (the first block's
        first-use memory was taken in the first pass; the last block's gradient is like the
        others'); where not, nothing is abandoned: it is traced in every pass."""
        program = group.pass_.program
        rec = program.recording
        out, traced, _, inputs = trace_forward(self, group, i, original, args, kwargs,
                                             rec.cache[0] if rec and rec.cache else None)
        if traced is not None and rec is not None and traced.shape() == rec.shape():
            program.edges.add(i)
            watch_backward(self, group, i, traced, out, inputs, edge=True)
        else:
            program.edges.discard(i)
        return out

    def _replay(self, group: Group, i: int, rec: Traced, args, kwargs, entry):
        inputs = tensors((args, kwargs))
        run = ReplayRun(self, group, i, rec, inputs, entry)
        if group.pass_.mode != "trusted":
            group.unverified += 1
        self.replayed += 1
        diff_in = [t for t in inputs if t.requires_grad]
        if rec.signature[0] and diff_in:
            outputs = ReplayedNode.apply(run, diff_in[0])
        else:
            outputs = run.forward()
        spec, leaves = rec.outputs
        it = iter(outputs)
        return pytree.tree_unflatten([next(it) if leaf[0] == "tensor" else leaf[1]
                                      for leaf in leaves], spec)

    def counted_since(self, before: tuple) -> bool:
        """Something `counts` counts happened since `before`, in a block's backward, besides
        what its declared gradient hooks did."""
        now = self.counts()
        return now[_COUNTED:] != before[_COUNTED:] or any(
            n - by_hooks != b for n, by_hooks, b in zip(now, self.hooks.by_hooks, before))

    def counts(self) -> tuple:
        """What a replay cannot do again: host values, notes, stream events of the script's,
        shared buffers, ops it cannot replay; then attention kernels that fell through or were
        disabled. The first _COUNTED are counts."""
        accountant = self.tracer.accountant
        collectives = self.tracer.collectives  # their stream events are replayed (nccl_work.py)
        streams = len(self.ledger.stream_events) - (collectives.stream_events_made
                                                     if collectives is not None else 0)
        return (len(accountant.placeholders), len(self.tracer.notes),
                streams, len(self.ledger.shares), accountant.unreplayable_ops,
                self.tracer.sdpa.pin_fell_through, frozenset(self.tracer.sdpa.disabled))
