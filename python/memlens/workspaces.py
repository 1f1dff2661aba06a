"""Memory that kernels allocate inside an op and that never appears as an op output.

Two kinds:
- transient: buffers that exist only while the op runs (the column buffer of a convolution
  computed as im2col + GEMM on the CPU). They can still set the peak. A transient rule returns
  the sizes of the buffers an op allocates for the target device, or None.
- persistent: memory a library takes on its first use and keeps until the process ends (the
  cuBLAS workspace of each handle and stream). A persistent rule returns `(key, label, bytes)`
  items; each key is allocated once per trace.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

Rule = Callable[[tuple, dict, object], "list[int] | None"]


class Persistent(NamedTuple):
    key: tuple  # allocated once per key, e.g. ("cublas", "cuda:0", "forward", 0)
    label: str  # the op name the ledger records for it
    nbytes: int
    device: torch.device


_UNSEEN = object()
PersistentRule = Callable[[tuple, dict, object], "list[Persistent]"]


class WorkspaceModel:
    def __init__(self, device_type: str, spec=None):
        """`spec`: the target DeviceSpec (CUDA rules size workspaces by compute capability)."""
        self.device_type = device_type
        self._rules: dict = {}
        self._persistent_rules: dict = {}  # func -> rule or None, filled as ops are seen
        self._taken: set = set()
        self.cuda = None
        if device_type == "cpu":
            from .workspaces_cpu import CPU_RULES

            self._rules.update(CPU_RULES)
        elif device_type == "cuda":
            from .workspaces_cuda import CudaRules

            self.cuda = CudaRules(spec)

    def __call__(self, func, args: tuple, kwargs: dict, out) -> list[int] | None:
        rule = self._rules.get(func)
        if rule is None:
            return None
        return rule(args, kwargs, out)

    def persistent(self, func, args: tuple, kwargs: dict, out) -> list[Persistent]:
        """What this op takes for good that nothing took before it (usually nothing)."""
        rule = self._persistent_rules.get(func, _UNSEEN)
        if rule is _UNSEEN:  # decided once per op: this runs for every op
            rule = self._persistent_rules[func] = \
                self.cuda.persistent_rule(func) if self.cuda is not None else None
        if rule is None:
            return []
        fresh = [p for p in rule(args, kwargs, out) if p.key not in self._taken]
        self._taken.update(p.key for p in fresh)
        return fresh


def element_size(t: torch.Tensor) -> int:
    return t.element_size()
