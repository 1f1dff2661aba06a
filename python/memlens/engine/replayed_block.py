"""A replayed block (engine/layer_replay.py): the autograd node that stands for it, its run
(the recorded forward's ledger operations booked on its own storages, and in backward the
recorded backward's), and the helpers that book a recording and make fake tensors on what it
booked."""

from __future__ import annotations

import functools
import weakref
import torch

from .factory_ops import empty_strided
from .layer_cache import entry_tensors, write_entry
from .layer_groups import Group, grads_held
from .layer_tape import Traced, rid_of


# -- the autograd node of a replayed block -----------------------------------------------

class ReplayedNode(torch.autograd.Function):
    """The autograd node of a replayed block: its backward replays the recorded backward."""

    @staticmethod
    def forward(ctx, run, x):
        ctx.set_materialize_grads(False)
        ctx.run = run
        run.watch_graph(ctx)
        outputs = run.forward()
        for t in outputs:
            if not (t.dtype.is_floating_point or t.dtype.is_complex):
                ctx.mark_non_differentiable(t)
        # The outputs autograd kept of the traced block (saved outputs hold no cycle).
        ctx.save_for_backward(*[outputs[j] for j in run.rec.held_outputs])
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        run, ctx.run = ctx.run, None
        return None, run.backward(grads)


class ReplayRun:
    """One replayed call of a block: the recording applied to its storages, and its backward.
    `replay` is the tracer's LayerReplay (layer_replay.py), which this module does not import."""

    def __init__(self, replay, group: Group, index: int, rec: Traced,
                 inputs: list[torch.Tensor], entry=None):
        self.replay = replay
        self.entry = entry  # the block's own entry of the cache it writes (layer_cache.py)
        self.group = group
        self.index = index
        self.rec = rec
        self.pass_ = group.pass_
        self.backwards = self.pass_.program.backwards  # those of the forward recording `rec`
        self.in_rids = [rid_of(replay.ledger, t) for t in inputs]
        # What autograd would keep of the block: its saved inputs and outputs.
        self.held = [inputs[j] for j in rec.held_inputs]
        self.params = list(group.blocks[index].parameters())
        self.fwd_rids: list[int] = []
        self.backward_done = False
        self.backward_pending = rec.signature[0] and bool(rec.alive or rec.held_inputs
                                                          or rec.held_outputs)

    def bindings(self) -> dict[tuple, int]:
        ledger = self.replay.ledger
        out: dict[tuple, int] = {}
        for j, rid in enumerate(self.in_rids):
            if rid is not None:
                out.setdefault(("in", j), rid)
        for j, p in enumerate(self.params):
            for kind, t in (("param", p), ("pgrad", p.grad)):
                rid = rid_of(ledger, t)
                if rid is not None:
                    out[(kind, j)] = rid
        for k, rid in enumerate(self.fwd_rids):
            out[("fwd", k)] = rid
        if self.entry is not None:
            for j, (_, rid) in enumerate(entry_tensors(self.entry, ledger)):
                out[("entry", j)] = rid
        return out

    def forward(self) -> list[torch.Tensor]:
        replay = self.replay
        self.fwd_rids = apply_ops(replay, self.rec.ops, self.bindings(), self.group, self.index)
        replay.count_sdpa(self.rec.sdpa)
        if self.rec.casts:
            replay.cast_runs.append(self)
        bases: dict[int, torch.Tensor] = {}
        if self.entry is not None:  # the cache keeps it, for as long as the cache lives
            entry, self.entry = self.entry, None
            write_entry(entry, self.rec, self.fwd_rids,
                        functools.partial(make_tensor, replay.tracer), bases, self.held)
        return [make_tensor(replay.tracer, leaf[2], self.fwd_rids[leaf[1]], bases)
                for leaf in self.rec.outputs[1] if leaf[0] == "tensor"]

    def backward(self, grads):
        replay, group = self.replay, self.group
        self.backward_pending = False
        recorded = self.backwards.get(grads_held(group.blocks[self.index]))
        if recorded is None:
            replay.abandon("a replayed block's backward ran before a traced block's was "
                           "recorded with the gradients its parameters hold")
        back = recorded.back
        # Confirmed already: by a traced block's backward earlier in its pass, or by those of
        # two passes before a trusted one (layer_groups.Pass); else by one still to come.
        mode = self.pass_.mode
        if not (mode == "checked" and self.pass_.backward_checked
                or mode == "trusted" and recorded.checks >= 2
                and (0 < self.index < group.n - 1 or self.index in recorded.edges)):
            recorded.pending += 1
        bound = self.bindings()
        # One output is differentiable (the recording checked): its gradient is the one given.
        grad = next((g for g in grads if g is not None), None)
        rid = rid_of(replay.ledger, grad)
        if rid is not None:
            bound[("gout", 0)] = rid
        new = apply_ops(replay, back.ops, bound, group, self.index, self._run_hook)
        replay.count_sdpa(back.sdpa)
        kind, k = back.grad_input
        result = grad if kind == "gout" else make_tensor(replay.tracer, back.grad_input_meta, new[k])
        for p, outcome in zip(self.params, back.param_grads):
            # (a gradient a declared hook was called on is the parameter's already)
            if isinstance(outcome, tuple) and \
                    rid_of(replay.ledger, p.grad) != new[outcome[0][1]]:
                p.grad = make_tensor(replay.tracer, outcome[1], new[outcome[0][1]])
        self.held = []
        self.backward_done = True
        replay.replayed_backward += 1
        return result

    def _run_hook(self, j: int, grad, meta) -> None:
        """The declared gradient hook of parameter j (declared_hooks.py), where the
        recorded block's ran, on the gradient AccumulateGrad gave the parameter: a tensor on
        the replay's record of it (the hook may let it go: its record is freed then), or the
        buffer outside the block the recorded block's parameter was given (`grad`: a rid, or
        ("outside", rid))."""
        replay = self.replay
        p = self.params[j]
        if isinstance(grad, tuple):
            t = replay.hooks.gradient_outside(grad[1], meta)
            if t is None:
                replay.abandon("a replayed block's gradient buffer is gone")
            p.grad = t
            del t
        elif grad is not None and rid_of(replay.ledger, p.grad) != grad:
            p.grad = make_tensor(replay.tracer, meta, grad)
        replay.hooks.hook_of(p)()

    def watch_graph(self, ctx) -> None:
        """Its autograd node (`ctx`) let go without a backward: a full trace frees what the
        block saved then, in an order this replay does not know. After the trace has ended
        (mark_end), what the script lets go is not part of the step."""
        replay = self.replay

        def gone(_ref):
            if self.backward_pending and replay.abandoned is None and replay.tracer.end_seq < 0:
                replay.abandoned = "a replayed block's graph was let go before its backward"

        self._node = weakref.ref(ctx, gone)


# -- booking a recording -------------------------------------------------------------------

def apply_ops(replay, ops: list[tuple], bound: dict[tuple, int], group: Group,
              index: int, run_hook=None) -> list[int]:
    """Book a recording's operations (layer_tape.Slots) for block `index` of the group: its
    allocations (new records), and frees and category changes of the memory `bound` names;
    its collectives' streams and works done again (kernels/nccl_work.py), and its parameters'
    declared gradient hooks called (`run_hook(j, rid, meta)`)."""
    ledger = replay.ledger
    mods = group.module_lists[index]
    phase = replay.tracer.phases.index
    new: list[int] = []
    works: list = []

    def rid_at(slot: tuple) -> int | None:
        return new[slot[1]] if slot[0] == "new" else bound.get(slot)

    for op in ops:
        kind = op[0]
        if kind == "nccl":
            replay.tracer.collectives.replayed(op, works)
            continue
        if kind == "hook":
            slot = op[2]
            run_hook(op[1], slot if slot is None or slot[0] == "outside" else rid_at(slot),
                     op[3])
            continue
        if kind == "alloc":
            _, nbytes, device, dtype, shape, category, mod, opid, stack, stream, bwd, sub = op
            rid = ledger.alloc(nbytes, device, dtype, shape, category,
                               mods[mod[1]] if isinstance(mod, tuple) else mod, phase,
                               opid, stack, stream=stream, backward=bwd)
            if sub:
                ledger.records[rid].sub = sub
            new.append(rid)
            continue
        rid = rid_at(op[1])
        if rid is None:
            replay.abandon("a replayed block's operation names memory it does not have")
        if kind == "free":
            ledger.free(rid)
        else:
            mod = op[3]
            ledger.recategorize(rid, op[2], mods[mod[1]] if isinstance(mod, tuple) else mod,
                                op[4])
    return new


def make_tensor(tracer, meta, rid: int, bases: dict | None = None) -> torch.Tensor:
    """A fake tensor on the storage of record `rid`, which the replay has booked: the
    tensor itself where it fills its storage (a gradient, most outputs), else a view of
    its storage (`bases`: one per record, for outputs that share one)."""
    shape, stride, offset, dtype, device, _, nbytes = meta
    accountant = tracer.accountant
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
    if offset == 0 and span * dtype.itemsize == nbytes and (bases is None
                                                            or rid not in bases):
        t = empty_strided(tracer.fake_mode, shape, stride, dtype, device)
        tracer.ledger.track_storage(t.untyped_storage(), rid)
        if bases is not None:
            bases[rid] = t
        return t
    base = bases.get(rid) if bases is not None else None
    if base is None:
        base = empty_strided(tracer.fake_mode, (nbytes // dtype.itemsize,), (1,), dtype, device)
        tracer.ledger.track_storage(base.untyped_storage(), rid)
        if bases is not None:
            bases[rid] = base
    with accountant.unbooked():
        return base.as_strided(shape, stride, offset)
