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
        self.pass_: Pass | None = None  # the pass whose forward runs now
        self.programs: dict[tuple, Program] = {}  # by where the blocks are called from
        self.unverified = 0  # forward replays of this pass not yet compared

    def relative(self, i: int) -> dict[int, int]:
        return {m: k for k, m in enumerate(self.module_lists[i])}


class Program:
    """What a group's blocks do when called from one place (the user stack of the call, which
    every allocation's stack ends with: a pipeline schedule calls a micro-batch's forward from
    its warm-up loop or its steady one). `recording`: layer_tape's Traced (which imports this
    module) of a block's forward, kept across passes while traced blocks match it; `checks`:
    how many did since it was made; `backwards`: the recordings of its backward, by which
    parameters held a gradient before it (a micro-batch after the first adds to them)."""

    def __init__(self):
        self.recording = None
        self.checks = 0
        self.backwards: dict[tuple, Recorded] = {}
        self.edges: set[int] = set()  # blocks 0 and N-1 where a traced forward matched
        self.state: tuple | None = None  # settled(block 1) when the recording was made

    def replace(self, traced, state: tuple | None = None) -> None:
        """A forward unlike the recording: recorded anew, with none of its backwards."""
        self.recording, self.checks, self.backwards, self.edges = traced, 0, {}, set()
        self.state = state

    def edge_replayed(self, group: Group, i: int) -> bool:
        """Block 0 or N-1 (`i`) matched the recording in a checked pass, forward and, with the
        gradients the blocks hold now, backward."""
        if i not in self.edges:
            return False
        if not self.recording.signature[0]:
            return True
        recorded = self.backwards.get(grads_held(group.blocks[i]))
        return recorded is not None and i in recorded.edges


class Recorded:
    """A block's backward recording (layer_tape's Backward): how many traced backwards matched
    it since, and how many replays used it that no traced backward has confirmed yet."""

    def __init__(self, back):
        self.back = back
        self.checks = 0
        self.pending = 0
        self.edges: set[int] = set()  # blocks 0 and N-1 whose traced backward matched it


class Pass:
    """One forward pass over a group, and the backward it is given:
    record   blocks 1 and N-2 traced (1 recorded, or compared with the recording), 2..N-3
             replayed; in backward N-2 recorded (or compared), N-3..2 replayed, 1 compared;
    checked  the recording has matched a traced block but once: 1..N-3 replayed, N-2 traced
             and compared, forward and backward (its backward before N-3..1's replays);
    trusted  the forward recording and the backward's matched traced blocks in two passes:
             1..N-2 replayed, forward and backward.
    Blocks 0 and N-1 are traced (first use; the last block's gradient), and in checked passes
    compared with the recordings: trusted passes replay those that matched (Program.edges)."""

    def __init__(self, mode: str, program: Program):
        self.mode = mode
        self.program = program
        self.backward_checked = False  # its block N-2's backward matched the recording


def grads_held(block: nn.Module) -> tuple:
    return tuple(p.grad is not None for p in block.parameters())


def next_pass(group: Group, place: tuple) -> Pass:
    """A pass over the group starting now, its blocks called from `place` (stacks.place)."""
    program = group.programs.setdefault(place, Program())
    return Pass(_mode(group, program), program)


def _mode(group: Group, program: Program) -> str:
    """How a pass uses its program's recordings (Pass)."""
    rec = program.recording
    if rec is None or differing_attributes(group.blocks) != group.differing or \
            settled(group.blocks[1]) != program.state:
        # an attribute set since: on some blocks only (read, maybe), or on all of them (a
        # dropout probability, a flag of the config they share)
        return "record"
    if not rec.signature[0] or not program.backwards:
        # No backward; or none has run yet (the micro-batches a pipeline stage runs before
        # its first backward): their replays' backwards are confirmed when they run, by
        # those of the first two passes (replayed_block.ReplayRun.backward).
        return "trusted" if program.checks >= 2 else "checked"
    # The gradients the blocks hold now are those they will hold at the backward (the
    # replays check), unless the backward of an earlier pass is still to run.
    recorded = program.backwards.get(grads_held(group.blocks[1]))
    if recorded is None:  # a backward unlike those recorded: block 1's traced to compare
        return "record"
    return "trusted" if program.checks >= 2 and recorded.checks >= 2 else "checked"


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
                if not _alike(first.get(name, _MISSING), m.__dict__.get(name, _MISSING)):
                    differing.add((type(m), name))
    return differing


def _alike(a, b, depth: int = 4) -> bool:
    """Equal values, or containers and objects of one class holding alike values, no tensor
    among them: helpers each block holds its own of and that keep no state of their own (with
    the `kernels` package, transformers >= 5.25 gives each attention layer its own instance of
    a stateless wrapper of its rotary function: `_kernel_funcs`)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or type(a) is not type(b):
        return False
    try:
        if bool(a == b):
            return True
    except Exception:
        pass
    if depth == 0:
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_alike(a[k], b[k], depth - 1) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_alike(x, y, depth - 1) for x, y in zip(a, b))
    fields_a, fields_b = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    return isinstance(fields_a, dict) and isinstance(fields_b, dict) and \
        _alike(fields_a, fields_b, depth - 1)


def settled(block: nn.Module) -> tuple:
    """What a block's forward may read that the script can change between passes: its
    attributes (a dropout probability, a flag), and the plain values of the objects they hold
    (a config the blocks share, whose flags a script may set in place). Integers held by the
    modules themselves are left out: a schedule numbers the micro-batch on every layer
    (Megatron's `current_microbatch`), which the program does not depend on."""
    parts = []
    for m in block.modules():
        for k, v in m.__dict__.items():
            if k in MODULE_STATE or k == "forward" or type(v) is int or \
                    isinstance(v, (nn.Module, torch.Tensor)):  # ("forward": ours, for a call)
                continue
            fields = getattr(v, "__dict__", None)
            plain = () if not isinstance(fields, dict) else tuple(
                (f, x) for f, x in fields.items() if isinstance(x, _PLAIN_VALUES))
            parts.append((k, v if isinstance(v, _PLAIN_VALUES) else id(v), plain))
    return tuple(parts)


_PLAIN_VALUES = (bool, int, float, str, type(None))


def own_state(block: nn.Module) -> tuple:
    """The block's own attributes, to see that its forward changed none (a counter, a cache
    kept on the module)."""
    return tuple(tuple((k, id(v)) for k, v in m.__dict__.items() if k not in MODULE_STATE)
                 for m in block.modules())
