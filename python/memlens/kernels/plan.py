"""Memory that kernels allocate inside an op and that never appears as an op output.

Two kinds:
- transient: buffers that exist only while the op runs (the column buffer of a convolution
  computed as im2col + GEMM on the CPU, the blocked copies and scratchpad of a oneDNN
  primitive, flash attention's fp32 accumulators). They can still set the peak. A transient rule
  returns, for one op call, either a list of byte sizes (buffers allocated after the op's
  outputs and freed before it returns) or a `Plan` when the order matters: some kernels
  allocate their buffers before the outputs, or book one output, free a buffer, then book the
  next.
- persistent: memory a library takes on its first use and keeps until the process ends (the
  cuBLAS workspace of each handle and stream). A persistent rule returns `(key, label, bytes)`
  items; each key is allocated once per trace.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Union

import torch


class Plan:
    """The allocations a kernel makes inside one op, in order, around its outputs.

        p = Plan()
        blocked = p.alloc(n)      # a buffer of n bytes; returns a handle
        p.free(blocked)           # its free
        p.outputs(0)              # the op's output 0 is allocated here

    Outputs are indices into the op's result (a tuple's positions, 0 for a single tensor).
    Outputs a plan never names are allocated before its first step; buffers it never frees are
    freed when the op returns. Zero-byte buffers are dropped (the allocator sees nothing).
    """

    def __init__(self) -> None:
        self.steps: list[tuple] = []
        self._handles = 0

    def alloc(self, nbytes: int) -> int:
        handle = self._handles
        self._handles += 1
        if nbytes > 0:
            self.steps.append(("alloc", handle, int(nbytes)))
        return handle

    def free(self, *handles: int) -> None:
        for h in handles:
            self.steps.append(("free", h))

    def outputs(self, *indices: int) -> None:
        self.steps.append(("out", indices))

    def named_outputs(self) -> set[int]:
        return {i for step in self.steps if step[0] == "out" for i in step[1]}

    @staticmethod
    def transient(sizes: list[int]) -> "Plan":
        """Buffers allocated after every output and freed before the op returns."""
        plan = Plan()
        for n in sizes:
            plan.alloc(n)
        return plan


Rule = Callable[[tuple, dict, object], Union[list, Plan, None]]


class Persistent(NamedTuple):
    key: tuple  # allocated once per key, e.g. ("cublas", "cuda:0", "forward", 0)
    label: str  # the op name the ledger records for it
    nbytes: int
    device: torch.device


PersistentRule = Callable[[tuple, dict, object], "list[Persistent]"]
