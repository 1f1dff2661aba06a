"""Memory that kernels allocate inside an op and that never appears as an op output.

Examples: the column buffer of a convolution computed as im2col + GEMM on the CPU. Such buffers
exist while the op runs, so they can set the peak. Each rule returns the sizes of the transient
buffers an op allocates for the target device, or None.
"""

from __future__ import annotations

from typing import Callable

import torch

Rule = Callable[[tuple, dict, object], "list[int] | None"]


class WorkspaceModel:
    def __init__(self, device_type: str):
        self.device_type = device_type
        self._rules: dict = {}
        if device_type == "cpu":
            from .workspaces_cpu import CPU_RULES

            self._rules.update(CPU_RULES)

    def __call__(self, func, args: tuple, kwargs: dict, out) -> list[int] | None:
        rule = self._rules.get(func)
        if rule is None:
            return None
        return rule(args, kwargs, out)


def element_size(t: torch.Tensor) -> int:
    return t.element_size()
