"""Values only a real run knows (`loss.item()`, `torch.equal`, the size of `nonzero`'s result):
what a trace answers instead, each placeholder noted once per user line for the report, and
the error for an op that cannot be answered (engine/accountant.py asks)."""

from __future__ import annotations

import sys

import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor, unset_fake_temporarily

from ..errors import DataDependentError, Location
from .dynamic_sizes import has_bound
from .healthy_values import HEALTHY_VALUE
from .shadow_values import SHADOW

_local_scalar_dense = torch.ops.aten._local_scalar_dense.default


def op_name(func) -> str:
    return str(func.overloadpacket).replace("aten.", "")


class MadeUpValues:
    """The placeholders of one trace, and the note of each (the report's and the snapshot's
    `placeholders`)."""

    def __init__(self, tracer):
        self.tracer = tracer  # its `stacks`, for the user's line
        self.placeholders: list[tuple[int, str, object]] = []  # (stack, op, value answered)
        self._noted: set = set()

    def read(self, t: torch.Tensor):
        """`t.item()` (and `_local_scalar_dense`): a constant's or a shadow's value where the
        trace knows it, else a placeholder of its dtype (a healthy value for a flag), noted."""
        constant = getattr(t, "constant", None)
        if constant is not None:
            return constant.item()
        shadow = getattr(t, SHADOW, None)
        if shadow is not None:  # made from host data: its real value (shadow_values.py)
            with unset_fake_temporarily():
                return shadow.item()
        if not isinstance(t, _FakeTensor):
            return _local_scalar_dense(t)
        if t.dtype == torch.bool:
            value: object = getattr(t, HEALTHY_VALUE, False)
        elif t.dtype.is_floating_point:
            value = 0.0
        elif t.dtype.is_complex:
            value = 0j
        else:
            value = 0
        self.note("item", value, depth=2)
        return value

    def result_of(self, func):
        """An op whose result is a Python value computed from tensor values (`torch.equal`,
        `allclose`): a placeholder of its type, noted at the line."""
        returns = func._schema.returns
        kind = str(returns[0].type) if len(returns) == 1 else ""
        value = {"bool": False, "int": 0, "float": 0.0, "SymInt": 0, "Scalar": 0.0}.get(kind)
        if value is None:
            raise self.data_dependent(func, "its result is a tensor value")
        self.note(op_name(func), value, depth=2)
        return value

    def note(self, op: str, value, depth: int = 1) -> None:
        """A value the trace made up, noted once per user line (a loop's `loss.item()` is one
        note, not one per step)."""
        stacks = self.tracer.stacks
        stack = stacks.capture(sys._getframe(depth + 1))
        top = stacks.top_frame(stack)
        key = (top[0], top[1], op) if top else (stack, op)
        if key in self._noted:
            return
        self._noted.add(key)
        self.placeholders.append((stack, op, value))

    def data_dependent(self, func, what: str, policy: str = "") -> DataDependentError:
        """The error for an op that needs tensor values the trace does not have, at the user's
        line."""
        stacks = self.tracer.stacks
        top = stacks.top_frame(stacks.capture(sys._getframe(2)))
        where = Location(top[0], top[1], top[2]) if top else None
        name = op_name(func)
        if policy == "error" and has_bound(func):
            remedy = ("--dynamic-sizes error was given; without it (or with a fraction such as "
                      "--dynamic-sizes 0.5) the trace sizes it within its bound")
        else:
            what += ", and it has no bound a trace could use"
            remedy = ("Make the size independent of tensor values (a fixed capacity, padding, "
                      "a size computed from shapes), or compute it from host tensors (CPU "
                      "tensors made from host data are computed for real)")
        return DataDependentError(
            f"`{name}` needs real tensor values ({what}); a memory trace has none. {remedy}.",
            where)
