"""The model the accountant asks, op by op, what the kernel allocates for itself: the rule
tables of the target's kernels (`cpu/rules.py`, `cuda.py`; the kinds of memory are in
`plan.py`)."""

from __future__ import annotations

import torch

from .plan import Persistent, Plan

_UNSEEN = object()


class WorkspaceModel:
    def __init__(self, device_type: str, spec=None):
        """`spec`: the target DeviceSpec (CUDA rules size workspaces by compute capability)."""
        self.device_type = device_type
        self._rules: dict = {}
        self._persistent_rules: dict = {}  # func -> rule or None, filled as ops are seen
        self._taken: set = set()
        self.cuda = None
        if device_type == "cpu":
            from .cpu.rules import CPU_RULES

            self._rules.update(CPU_RULES)
        elif device_type == "cuda":
            from .cuda import CudaRules, cuda_rules

            self._rules.update(cuda_rules(spec))
            self.cuda = CudaRules(spec)

    def add_rule(self, func, rule):
        """A library's own kernel (a plugin's rule for its operator); returns the undo."""
        self._rules[func] = rule
        return lambda: self._rules.pop(func, None)

    def __call__(self, func, args: tuple, kwargs: dict, out) -> Plan | None:
        rule = self._rules.get(func)
        if rule is None:
            return None
        plan = rule(args, kwargs, out)
        if plan is None or isinstance(plan, Plan):
            return plan
        return Plan.transient(list(plan)) if plan else None

    def persistent(self, func, args: tuple, kwargs: dict, out) -> list[Persistent]:
        """What this op takes for good that nothing took before it (usually nothing)."""
        rule = self._persistent_rules.get(func, _UNSEEN)
        if rule is _UNSEEN:  # decided once per op: this runs for every op
            rule = self._persistent_rules[func] = \
                self.cuda.persistent_rule(func) if self.cuda is not None else None
        if rule is None:
            return []
        return self.take(rule(args, kwargs, out))

    def take(self, items: list[Persistent]) -> list[Persistent]:
        """Those of `items` nothing took before, now taken (an op's rule's, above, or a plugin
        kernel's that takes a library's persistent memory without such an op)."""
        fresh = [p for p in items if p.key not in self._taken]
        self._taken.update(p.key for p in fresh)
        return fresh

    def forget(self, key: tuple) -> None:
        """The persistent item of `key` was given back: the next use takes it again."""
        self._taken.discard(key)


def element_size(t: torch.Tensor) -> int:
    return t.element_size()
