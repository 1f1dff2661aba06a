"""torch.distributed's object point-to-point (`send_object_list` / `recv_object_list`) between
simulated ranks: a send is recorded, a receive reads the sender's record, tracing the sender
first when it has not been (distributed/object_p2p.py).

Objects travel pickled, as torch sends them; a tensor among them (fake under the trace: there
are no bytes) travels as its metadata (shape, stride, dtype, device, requires_grad) and is made
anew, empty, on the receiver, where the real one would be unpickled into a new buffer.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any

import torch

from ..distributed.object_p2p import ObjectExchange
from .patcher import Patcher

_TENSOR = "memlens.tensor"


def apply(patcher: Patcher, spec) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    exchange = ObjectExchange(spec.rank)
    patcher.defer(exchange.close)

    def global_rank(group, rank, group_rank) -> int:
        group = c10d._group_or_default_group(group)
        return c10d._canonicalize_group_rank(group, rank, group_rank, return_global=True)

    def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None,
                         use_batch=False):
        exchange.send(global_rank(group, dst, group_dst), _dumps(list(object_list)))

    def recv_object_list(object_list, src=None, group=None, device=None, group_src=None,
                         use_batch=False):
        if src is None and group_src is None:
            from ..errors import MemlensError

            raise MemlensError(f"recv_object_list from any rank (no src) at {_caller()}: a "
                               "simulated rank cannot tell which rank would send first")
        sender = global_rank(group, src, group_src)
        objects = _loads(exchange.receive(sender, _caller()))
        object_list[:len(objects)] = objects
        return sender

    for owner in (c10d, dist):
        patcher.setattr(owner, "send_object_list", send_object_list)
        patcher.setattr(owner, "recv_object_list", recv_object_list)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any):
        if isinstance(obj, torch.Tensor):
            return (_TENSOR, tuple(obj.shape), tuple(obj.stride()), obj.dtype, str(obj.device),
                    obj.requires_grad)
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        _, shape, stride, dtype, device, requires_grad = pid
        t = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        return t.requires_grad_(requires_grad) if requires_grad else t


def _dumps(objects: list) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer).dump(objects)
    return buffer.getvalue()


def _loads(data: bytes) -> list:
    return _Unpickler(io.BytesIO(data)).load()


def _caller() -> str:
    """file:line of the code that receives (the caller of recv_object_list)."""
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
