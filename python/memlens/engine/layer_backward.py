"""A traced block's backward recorded for layer replay (engine/layer_replay.py): from the
gradient of its output to that of its input, its ledger operations relative to the block
(layer_tape.Slots), the gradients it gives its parameters, and its declared gradient hooks'
calls (declared_hooks.py). Block N-2's recording is replayed for the blocks before it; block
1's is compared with it."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from .layer_groups import Group, own_state
from .layer_tape import Backward, Slots, Traced, Unsupported, rid_of, tensor_meta


def watch_backward(replay, group: Group, i: int, traced: Traced, out, inputs,
                   compare: bool) -> bool:
    """Record the backward of traced block i: block N-2's, for the replays, or block 1's, to
    compare (`compare`). False: a backward this cannot record (the group is traced in full
    from now on). `replay` is the tracer's LayerReplay."""
    if not traced.signature[0]:
        return True  # no autograd: no backward
    ledger = replay.ledger
    block = group.blocks[i]
    params = list(block.parameters())
    diff_in = [t for t in inputs if t.requires_grad]
    diff_out = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
                and t.requires_grad]
    if len(diff_in) != 1 or len(diff_out) != 1:
        if diff_out or any(p.requires_grad for p in params):
            group.disabled = "it takes or returns several differentiable tensors, or none"
            return False
        return True
    x = diff_in[0]
    y = diff_out[0]
    rel = group.relative(i)
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
        state["before"] = tuple(p.grad is not None for p in params)
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
            if not compare:
                group.disabled = f"its backward makes {e}"
        if compare:
            _compare(replay, group, back)
        else:
            group.backward = back
        return None

    y.register_hook(started)
    x.register_hook(ended)
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


def _compare(replay, group: Group, back: Backward | None) -> None:
    """Block 1's backward against the recording the blocks before N-2 replayed."""
    recorded = group.backward
    if group.unverified_backward and (back is None or recorded is None
                                      or back.shape() != recorded.shape()):
        replay.abandon("block 1's backward differs from the replayed ones'", raise_now=False)
    group.unverified_backward = 0
