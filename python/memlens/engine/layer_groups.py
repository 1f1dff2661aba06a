"""Groups of identical blocks (engine/layer_replay.py): runs of one class in a ModuleList or
Sequential with the same structure and no hooks of their own, and the attributes that differ
between them (a layer index), watched while a block's forward is recorded."""

from __future__ import annotations

import torch
from torch import nn


MIN_BLOCKS = 5  # blocks 0, 1, N-2 and N-1 are traced: at least one to replay
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
MODULE_STATE = {"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set",
                "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                "_load_state_dict_post_hooks", "_forward_hooks_always_called",
                "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", *_HOOK_DICTS}
_MISSING = object()
PLAIN = (torch.Tensor, torch._subclasses.FakeTensor, nn.Parameter)  # no subclass (DTensor)


class Group:
    def __init__(self, blocks: list[nn.Module], tracker):
        self.blocks = blocks
        self.n = len(blocks)
        self.module_lists = [[tracker.index_of(m) for m in b.modules()] for b in blocks]
        self.differing = differing_attributes(blocks)
        self.disabled: str | None = None
        self.declined: str | None = None  # why the last pass's recording was not used
        self.next = 0  # the block expected next in this pass
        # layer_tape's Traced and Backward (which import this module): block 1's forward and
        # block N-2's backward in this pass
        self.recording = None
        self.backward = None
        self.unverified = 0  # forward replays of this pass not yet compared
        self.unverified_backward = 0  # backward replays not yet compared

    def relative(self, i: int) -> dict[int, int]:
        return {m: k for k, m in enumerate(self.module_lists[i])}


def find_groups(root: nn.Module, tracker, own_hook) -> list[Group]:
    """Runs of at least MIN_BLOCKS modules of one class in a ModuleList or Sequential, alike in
    structure. `own_hook`: the classifier's gradient hook, the one hook a parameter may have."""
    groups = []
    for container in root.modules():
        if not isinstance(container, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(container.children())
        start = 0
        while start < len(children):
            end = start + 1
            while end < len(children) and type(children[end]) is type(children[start]):
                end += 1
            run = children[start:end]
            # A block compiled on its own (torch.compile(block), block.compile()) runs its
            # compiled program: nothing to replay.
            if len(run) >= MIN_BLOCKS and not _compiled(run[0]):
                first = structure(run[0], own_hook)
                if first is not None and all(structure(b, own_hook) == first
                                             for b in run[1:]):
                    groups.append(Group(run, tracker))
            start = end
    # Groups inside the blocks of another (a block of repeated sub-blocks): the outer group's
    # replay stands for them.
    inner = {id(m) for g in groups for b in g.blocks for m in b.modules() if m is not b}
    return [g for g in groups if id(g.blocks[0]) not in inner]


def _compiled(block: nn.Module) -> bool:
    return type(block).__name__ == "OptimizedModule" or \
        getattr(block, "_compiled_call_impl", None) is not None


def structure(block: nn.Module, own_hook, calling: bool = False):
    """A block's submodules, parameters and buffers as metadata; None where it or a parameter
    has hooks of its own (an optimizer run in backward) or a forward set on the instance (a
    library's wrapper). `calling`: inside the block's call, whose `forward` layer replay has
    set for the call."""
    parts = []
    for name, m in block.named_modules():
        if any(getattr(m, d, None) for d in _HOOK_DICTS) or (
                "forward" in m.__dict__ and not (calling and m is block)):
            return None
        params = []
        for pname, p in m._parameters.items():
            if p is None:
                params.append((pname, None))
                continue
            if type(p) not in PLAIN or p._backward_hooks or any(
                    h != own_hook for h in (p._post_accumulate_grad_hooks or {}).values()):
                return None
            params.append((pname, tuple(p.shape), p.stride(), p.dtype, p.device,
                           p.requires_grad))
        buffers = tuple((b, None if t is None else (type(t), tuple(t.shape), t.stride(),
                                                    t.dtype, t.device))
                        for b, t in m._buffers.items())
        parts.append((name, type(m), m.training, tuple(params), buffers))
    return tuple(parts)


def differing_attributes(blocks) -> set[tuple[type, str]]:
    """(class, name) of the attributes whose values differ between the blocks (a layer
    index): allowed while the forward never reads them."""
    differing: set[tuple[type, str]] = set()
    for mods in zip(*(list(b.modules()) for b in blocks)):
        first = mods[0].__dict__
        for m in mods[1:]:
            for name in set(first) | set(m.__dict__):
                if name in MODULE_STATE or name == "forward":  # ours, for the call
                    continue
                a, b = first.get(name, _MISSING), m.__dict__.get(name, _MISSING)
                if a is b:
                    continue
                try:
                    same = not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) \
                        and bool(a == b)
                except Exception:
                    same = False
                if not same:
                    differing.add((type(m), name))
    return differing


def own_state(block: nn.Module) -> tuple:
    """The block's own attributes, to see that its forward changed none (a counter, a cache
    kept on the module)."""
    return tuple(tuple((k, id(v)) for k, v in m.__dict__.items() if k not in MODULE_STATE)
                 for m in block.modules())
