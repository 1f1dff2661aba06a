"""A traced block's forward recorded for layer replay (engine/layer_replay.py): its ledger
operations relative to the block (layer_tape.Slots), what it returns, what autograd keeps of
it, and the cache entry it writes (layer_cache.py); or why it cannot be replayed. Block 1's is
the recording; others are compared with it."""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from .layer_cache import EntryBefore
from .layer_groups import Group, own_state
from .layer_tape import (CONSTANTS, PLAIN, Slots, Traced, Unsupported, autocast_on,
                         has_values, rid_of, signature, tensor_meta, tensors)


def trace_forward(replay, group: Group, i: int, original, args, kwargs, where=None):
    """Block i traced in full, its ledger operations recorded: (output, Traced or None,
    why not, its input tensors). `where`: the recorded block's layer index (module position,
    attribute), for the cache entry this block writes; None while block 1 is recorded (its
    reads say). `replay` is the tracer's LayerReplay."""
    sig = signature(group.blocks[i], replay.tracer.classifier.gradient_hook, args, kwargs,
                    replay.caches.layers_of)
    if isinstance(sig, str):
        return original(*args, **kwargs), None, sig, ()
    if replay.ledger.tap is not None:  # inside another recording (a backward's)
        return original(*args, **kwargs), None, None, ()
    try:
        _, layers = replay.caches.find(args, kwargs)
    except Unsupported as e:
        return original(*args, **kwargs), None, str(e), ()
    ledger = replay.ledger
    entries = [EntryBefore(e, ledger) for e in layers] if layers is not None else None
    block = group.blocks[i]
    inputs = tensors((args, kwargs))
    in_rids = [rid_of(ledger, t) for t in inputs]
    params = list(block.parameters())
    slots = Slots(ledger, group.relative(i))
    slots.bind("in", in_rids)
    slots.bind("param", [rid_of(ledger, p) for p in params])
    slots.bind("pgrad", [rid_of(ledger, p.grad) for p in params])
    before, counts = own_state(block), replay.counts()
    sdpa_before = dict(replay.tracer.sdpa.calls)
    tape: list[tuple] = []
    packed: set[int] = set()
    ledger.tap, replay.packed = tape, packed
    try:
        out = original(*args, **kwargs)
    finally:
        ledger.tap = replay.packed = None
    try:
        if counts != replay.counts():
            raise Unsupported("host values, notes, streams, collectives or shared buffers")
        sdpa = replay.sdpa_since(sdpa_before)
        if own_state(block) != before:
            raise Unsupported("state it keeps on itself")
        written = None if entries is None else replay.caches.written(
            list(block.modules()), layers, entries, where)
        if written is not None:  # the tensors its entry held: freed by the block, by place
            slots.bind("entry", [rid for _, rid in entries[written[1]].tensors])
        ops, new, _ = slots.normalize(tape, replay.tracer.accountant.persistent_rids())
        leaves, spec = pytree.tree_flatten(out)
        slot_of = {rid: k for k, rid in enumerate(new)}
        cache = None if written is None else replay.caches.effect(layers, entries, written,
                                                                ops, slot_of)
        described, out_rids = [], []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                k = slot_of.get(rid_of(ledger, leaf))
                if k is None or type(leaf) not in PLAIN or has_values(leaf):
                    raise Unsupported("an output that is not a new tensor without values")
                described.append(("tensor", k, tensor_meta(leaf)))
                out_rids.append(new[k])
            elif isinstance(leaf, CONSTANTS):
                described.append(("constant", leaf))
            else:
                raise Unsupported("an output that is not a tensor or a constant")
        if None in packed:
            raise Unsupported("a saved tensor without a storage")
        held_inputs = tuple(j for j, rid in enumerate(in_rids) if rid in packed)
        held_outputs = tuple(j for j, rid in enumerate(out_rids) if rid in packed)
        alive = tuple(k for k, rid in enumerate(new) if ledger.records[rid].free_seq < 0
                      and rid not in out_rids)
        in_entry = () if cache is None else tuple(p[2] for p in cache[2][1] if p[1] == "new")
        # Autocast keeps its casts of weights until the outermost autocast exits (its
        # cache): some saved for backward as well, some (a bias) only there. A copy the
        # cache entry keeps (a window size moved to the device) is the entry's.
        casts = tuple(k for k in alive if ledger.ops[ledger.records[new[k]].op] == "_to_copy"
                      and autocast_on(ledger.records[new[k]].device) and k not in in_entry)
        # Without autograd (no_grad: an evaluation, a checkpoint's first forward) nothing
        # is held for a backward: what a library's saved-tensor hook saw saved is kept by
        # something else (a compiled function's outputs, freed after the block returns).
        held = packed if sig[0] else set()
        kept = [new[k] for k in alive if new[k] not in held and k not in casts
                and k not in in_entry]
        # Activation checkpointing keeps the RNG states it saved until the block's backward
        # has recomputed it (held by its graph: the recorded backward must free them).
        rng = tuple(k for k in alive if new[k] in kept
                    and ledger.ops[ledger.records[new[k]].op] == "get_rng_state")
        kept = [rid for rid in kept if slot_of[rid] not in rng]
        if rng and any(type(t.grad_fn).__name__ == "CheckpointFunctionBackward"
                       for t in tensors(out)):
            # The reentrant checkpoint keeps them on its node, until its graph is let go
            raise Unsupported("RNG states that a reentrant checkpoint keeps")
        if kept:
            rec = ledger.records[kept[0]]
            raise Unsupported(f"memory it keeps outside autograd (`{ledger.ops[rec.op]}`, "
                              f"{rec.dtype} {list(rec.shape)})")
    except Unsupported as e:
        return out, None, str(e), ()
    cached = tuple(k for k in casts if new[k] not in packed)
    traced = Traced(sig, ops, new, (spec, described), held_inputs, held_outputs, alive,
                    in_rids, sdpa, (casts, cached))
    traced.cache = cache
    traced.rng_states = rng
    traced.cache_saved = tuple(k for k in in_entry if new[k] in packed)
    return out, traced, None, inputs
