"""A traced block's backward recorded for layer replay (engine/layer_replay.py): from the
gradient of its output to that of its input, its ledger operations relative to the block
(layer_tape.Slots), the gradients it gives its parameters, and its declared gradient hooks'
calls (declared_hooks.py). The first is kept (block N-2's, the first a pass runs after the
last block's) and replayed for the blocks before it; each later one (block 1's, or N-2's in a
later pass) is compared with the one kept for the same gradients held before it."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from .layer_groups import Group, grads_held, own_state
from .layer_tape import Backward, Slots, Traced, Unsupported, rid_of, tensor_meta


def watch_backward(replay, group: Group, i: int, traced: Traced, out, inputs,
                   edge: bool = False) -> bool:
    """Record the backward of traced block i, and keep it or compare it with the one kept
    (`_check`). False: a backward this cannot record (the group is traced in full from now
    on). `edge`: block 0 or N-1 of a checked pass, only compared (a backward unlike the
    recording is no fault there). `replay` is the tracer's LayerReplay."""
    if not traced.signature[0]:
        return True  # no autograd: no backward
    ledger = replay.ledger
    block = group.blocks[i]
    params = list(block.parameters())
    diff_in = [t for t in inputs if t.requires_grad]
    diff_out = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
                and t.requires_grad]
    if len(diff_in) != 1 or len(diff_out) != 1:
        if edge:
            return False
        if diff_out or any(p.requires_grad for p in params):
            group.disabled = "it takes or returns several differentiable tensors, or none"
            return False
        return True
    x = diff_in[0]
    y = diff_out[0]
    rel = group.relative(i)
    pass_ = group.pass_
    backwards = pass_.program.backwards  # those of this forward's recording
    in_rids = traced.in_rids
    new = traced.new
    state: dict[str, Any] = {}

    def started(grad):
        if ledger.tap is not None:
            return None
        slots = Slots(ledger, rel)
        slots.bind("in", in_rids)
        slots.bind("param", [rid_of(ledger, p) for p in params])
        slots.bind("pgrad", [rid_of(ledger, p.grad) for p in params])
        slots.bind("fwd", new)
        slots.bind("gout", [rid_of(ledger, grad)])
        state["slots"] = slots
        state["before"] = grads_held(block)
        state["sdpa"] = dict(replay.tracer.sdpa.calls)  # a checkpoint's recompute calls it
        state["tape"] = ledger.tap = []
        replay.hooks.record(params)
        state["counts"], state["own"] = replay.counts(), own_state(block)
        return None

    def ended(grad):
        tape = state.pop("tape", None)
        if tape is None or ledger.tap is not tape:
            return None
        ledger.tap = None
        replay.hooks.record(None)
        try:
            if replay.counted_since(state["counts"]):
                raise Unsupported("host values, notes, streams, collectives or shared buffers")
            if own_state(block) != state["own"]:
                raise Unsupported("state it keeps on itself")
            back = _backward_of(replay, state["slots"], tape, grad, params, state["before"],
                                traced.rng_states)
            back.sdpa = replay.sdpa_since(state["sdpa"])
        except Unsupported as e:
            back = None
            if not edge:
                group.disabled = f"its backward makes {e}"
        if edge:
            recorded = backwards.get(back.grads_before) if back is not None else None
            if recorded is not None and recorded.back.shape() == back.shape():
                recorded.edges.add(i)
                # A traced backward like the recording confirms the replays that used it, as
                # block 1's does: block 0's, after them, where block N-2 recorded anew in a
                # checked pass (a recompiled kernel of the step: Dynamo's dynamic shapes).
                recorded.pending = 0
        else:
            _check(replay, backwards, pass_, back)
        return None

    # A tensor's hooks run in the order they were added: the end of this backward goes before
    # the start of the watched block's before it, whose output `x` is (both traced: block N-1
    # compared in a checked pass, block N-2 compared after it).
    before = replay.backward_starts.get(x)
    if before is not None:
        before[1].remove()
    x.register_hook(ended)
    if before is not None:
        replay.backward_starts[x] = (before[0], x.register_hook(before[0]))
    replay.backward_starts[y] = (started, y.register_hook(started))
    return True


def _backward_of(replay, slots: Slots, tape, grad, params, before, rng_states) -> Backward:
    ledger = replay.ledger
    ops, new, known = slots.normalize(tape, replay.tracer.accountant.persistent_rids())
    freed = {op[1] for op in ops if op[0] == "free"}
    if any(("fwd", k) not in freed for k in rng_states):
        raise Unsupported("RNG states that activation checkpointing keeps beyond the block's "
                          "backward")
    grad_input = known.get(rid_of(ledger, grad))
    if grad_input is None or grad_input[0] not in ("new", "gout"):
        raise Unsupported("a gradient from outside the block")
    param_grads: list = []
    for p in params:
        if p.grad is None:
            param_grads.append(None)
            continue
        slot = known.get(rid_of(ledger, p.grad))
        if slot is not None and slot[0] == "pgrad":
            param_grads.append("kept")
        elif slot is not None and slot[0] == "new":
            param_grads.append((slot, tensor_meta(p.grad)))
        else:
            raise Unsupported("a parameter gradient from outside the block")
    return Backward(ops, grad_input, tensor_meta(grad), param_grads, before)


def _check(replay, backwards: dict, pass_, back) -> None:
    """A traced block's backward (None: one that cannot be recorded) against the recording kept
    for the gradients its parameters held before it: kept if there is none, counted as a match
    (the replays that used it are confirmed), or, unlike, kept instead where no replay used the
    one before."""
    if back is None:
        if any(r.pending for r in backwards.values()):
            replay.abandon("a traced block's backward cannot be recorded, and the replayed "
                           "ones' was", raise_now=False)
        return
    recorded = backwards.get(back.grads_before)
    if recorded is None:
        backwards[back.grads_before] = replay.keep(back)
    elif recorded.back.shape() == back.shape():
        recorded.checks += 1
        recorded.pending = 0
        pass_.backward_checked = True
    elif recorded.pending:
        replay.abandon("a traced block's backward differs from the replayed ones'",
                       raise_now=False)
    else:
        backwards[back.grads_before] = replay.keep(back)
