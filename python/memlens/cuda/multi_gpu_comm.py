"""One process, several simulated GPUs: the copies between them that `torch.nn.DataParallel`
and `torch.nn.parallel.comm` make, as the CUDA build makes them (torch/csrc/cuda/comm.cpp).

A build without CUDA has none of these `torch._C` entry points (`module 'torch._C' has no
attribute '_scatter'`), and a CUDA build's would run real kernels on fake tensors. Each is made
here of ordinary ops on fake tensors, so the accountant books what the GPU allocates:

- `_scatter`: the input split along `dim` (`chunk_sizes`, or `chunk` into one piece per
  device), each piece copied to its device (on the given stream); a piece already there is
  not copied. DataParallel's inputs.
- `_gather`: one tensor of the whole size on the destination (`-1`: the host), each piece
  copied into its slice. DataParallel's output, on `cuda:0`.
- `_broadcast`: with NCCL (every GPU build has it), the tensor itself for the first device and
  a new tensor on each other one; a host tensor or a non-contiguous one is copied to each.
- `_broadcast_coalesced`: DataParallel's replicas of the parameters and buffers. Tensors are
  grouped by type into buckets of `buffer_size` bytes (torch::utils::take_tensors); each bucket
  is flattened on the first device (a copy, unless it holds one tensor) and broadcast, and each
  other device's replicas are views of its one flat buffer per bucket. The first device's
  outputs are the inputs themselves.
- `_scatter_out`, `_gather_out`, `_broadcast_out`: the same into given tensors (no
  allocation).
- `replicate`: the replicas' parameters are booked as parameters of their GPU.
- `_nccl_reduce`, `_nccl_all_reduce`, `_nccl_broadcast`, `_nccl_all_gather`,
  `_nccl_reduce_scatter` (torch.cuda.nccl, which DataParallel's backward reduces gradients
  with): they write into tensors that exist, so they allocate nothing; with them present,
  `torch.cuda.nccl.is_available` answers as on a GPU build.

`parallel_apply` runs each replica in a thread of its own; the tracer's dispatch modes are per
thread, so there the replicas would run on no fake tensors at all. Its threads run here one
after another, in the traced thread, each in the device, stream and autocast context torch's
worker sets: each GPU's allocations are what they would be, since no GPU shares memory.

Not modelled: the memory NCCL's single-process communicators take on each device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..patches.patcher import Patcher, check_tested

# ScalarType's order in c10 (take_tensors keys its buckets by it): buckets that never filled are
# returned in this order.
_SCALAR_TYPE_ORDER = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                      torch.float16, torch.float32, torch.float64, torch.complex32,
                      torch.complex64, torch.complex128, torch.bool, torch.qint8, torch.quint8,
                      torch.qint32, torch.bfloat16]


def _type_key(t: torch.Tensor) -> tuple[int, str]:
    """The bucket key: c10's ScalarType order; later types (float8, ...) after, by name."""
    try:
        return (_SCALAR_TYPE_ORDER.index(t.dtype), "")
    except ValueError:
        return (len(_SCALAR_TYPE_ORDER), str(t.dtype))


def _cuda(index: int) -> torch.device:
    return torch.device("cuda", index)


def take_tensors(tensors, size_limit: int) -> list[list[int]]:
    """The indices of `tensors` in the buckets torch::utils::take_tensors makes: per type, a
    bucket is closed once it holds `size_limit` bytes or more; the open ones follow, in type
    order."""
    results: list[list[int]] = []
    open_buckets: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
    for i, t in enumerate(tensors):
        indices, size = open_buckets.setdefault(_type_key(t), ([], [0]))
        indices.append(i)
        size[0] += t.numel() * t.element_size()
        if size[0] >= size_limit:
            results.append(indices)
            del open_buckets[_type_key(t)]
    for key in sorted(open_buckets):
        results.append(open_buckets[key][0])
    return results


def scatter(tensor, devices, chunk_sizes=None, dim=0, streams=None):
    if chunk_sizes is not None:
        if sum(chunk_sizes) != tensor.size(dim):
            raise RuntimeError("given chunk sizes don't sum up to the tensor's size "
                               f"(sum(chunk_sizes) == {sum(chunk_sizes)}, but expected "
                               f"{tensor.size(dim)})")
        chunks, start = [], 0
        for size in chunk_sizes:
            if size <= 0:
                raise RuntimeError("Chunk size must be positive")
            chunks.append(tensor.narrow(dim, start, size))
            start += size
    else:
        chunks = list(tensor.chunk(len(devices), dim))
    out = []
    for i, chunk in enumerate(chunks):
        stream = streams[i] if streams else None
        context = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with context:
            out.append(chunk.to(_cuda(devices[i]), non_blocking=True, copy=False))
    return out


def _suggests_channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and not t.is_contiguous() and \
        t.is_contiguous(memory_format=torch.channels_last)


def gather(tensors, dim=0, destination=None):
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    size = list(tensors[0].shape)
    total = 0
    for t in tensors:
        if t.device.type != "cuda":
            raise RuntimeError("Gather expects all inputs to have CUDA type")
        expected = list(size)
        expected[dim] = t.size(dim)
        if list(t.shape) != expected:
            raise RuntimeError(f"Gather got an input of invalid size: got {list(t.shape)}, "
                               f"but expected {expected}")
        total += t.size(dim)
    size[dim] = total
    if destination == -1:
        device = torch.device("cpu")
    else:
        device = _cuda(torch.cuda.current_device() if destination is None else destination)
    fmt = torch.channels_last if all(_suggests_channels_last(t) for t in tensors) \
        else torch.contiguous_format
    result = torch.empty(size, dtype=tensors[0].dtype, device=device, memory_format=fmt)
    _gather_into(tensors, result, dim)
    return result


def _gather_into(tensors, result, dim) -> None:
    start = 0
    for t in tensors:
        result.narrow(dim, start, t.size(dim)).copy_(t, non_blocking=True)
        start += t.size(dim)


def gather_out(tensors, out, dim=0):
    _gather_into(tensors, out, dim)
    return out


def scatter_out(tensor, out_tensors, dim=0, streams=None):
    start = 0
    for i, out in enumerate(out_tensors):
        stream = streams[i] if streams else None
        context = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with context:
            out.copy_(tensor.narrow(dim, start, out.size(dim)), non_blocking=True)
        start += out.size(dim)
    return out_tensors


def broadcast(tensor, devices):
    if tensor.device.type == "cuda" and tensor.get_device() != devices[0]:
        raise RuntimeError("device of broadcasted tensor must appear as the first on devices "
                           "list")
    if tensor.device.type == "cuda" and tensor.is_contiguous():  # NCCL's broadcast
        return [tensor] + [torch.empty(tensor.shape, dtype=tensor.dtype, device=_cuda(d))
                           for d in devices[1:]]
    out = [tensor] if tensor.device.type == "cuda" else []
    for d in devices[len(out):]:
        out.append(tensor.to(_cuda(d), non_blocking=True, copy=True))
    return out


def broadcast_out(tensor, out_tensors):
    for out in out_tensors:
        if out is not tensor:
            out.copy_(tensor, non_blocking=True)
    return out_tensors


def broadcast_coalesced(tensors, devices, buffer_size):
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    if any(t.get_device() != devices[0] for t in tensors):
        raise RuntimeError("all tensors must be on devices[0]")
    if any(t.is_sparse for t in tensors):
        from ..errors import MemlensError

        raise MemlensError("torch._C._broadcast_coalesced of sparse tensors (DataParallel "
                           "with sparse parameters or buffers) is not simulated by memlens")
    outputs: list[list[Any]] = [list(tensors)] + [[None] * len(tensors) for _ in devices[1:]]
    with torch.cuda.device(devices[0]):
        for bucket in take_tensors(tensors, buffer_size):
            chunk = [tensors[i] for i in bucket]
            copies = broadcast(_flatten_dense_tensors(chunk), devices)
            for k, d in enumerate(devices[1:], start=1):
                with torch.cuda.device(d):
                    views = _unflatten_dense_tensors(copies[k], chunk)
                    for i, view in zip(bucket, views):
                        outputs[k][i] = view.detach()  # its own version counter, as in C++
    return outputs


def _nccl_in_place(*args, **kwargs) -> None:
    """An NCCL collective between the process's GPUs: it writes into tensors that exist."""
    return None


ENTRY_POINTS = {
    "_scatter": scatter, "_scatter_out": scatter_out, "_gather": gather,
    "_gather_out": gather_out, "_broadcast": broadcast, "_broadcast_out": broadcast_out,
    "_broadcast_coalesced": broadcast_coalesced,
    "_nccl_reduce": _nccl_in_place, "_nccl_all_reduce": _nccl_in_place,
    "_nccl_broadcast": _nccl_in_place, "_nccl_all_gather": _nccl_in_place,
    "_nccl_reduce_scatter": _nccl_in_place,
}


class _InlineThread:
    """A `threading.Thread` whose target runs in the calling thread when it is started."""

    def __init__(self, target=None, args=(), kwargs=None, **_: Any) -> None:
        self._target, self._args, self._kwargs = target, args, kwargs or {}

    def start(self) -> None:
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def join(self, timeout=None) -> None:
        return None


def apply(patcher: Patcher, mark_parameter) -> None:
    """Install the entry points on `torch._C`, parallel_apply's threads inline, and tell
    `mark_parameter(t)` of the parameters DataParallel replicates on the other GPUs (undone
    with the patcher)."""
    import sys
    import threading
    import types

    import torch.nn.parallel.data_parallel  # noqa: F401 (imports the modules below)

    # The package's `parallel_apply` and `replicate` are the functions, which hide the
    # modules' names.
    parallel_apply = sys.modules["torch.nn.parallel.parallel_apply"]
    replicate_module = sys.modules["torch.nn.parallel.replicate"]

    check_tested("cuda_multi_gpu_comm", torch.__version__)
    for name, fn in ENTRY_POINTS.items():
        patcher.setattr(torch._C, name, fn)
    inline = types.SimpleNamespace(Thread=_InlineThread, Lock=threading.Lock)
    patcher.setattr(parallel_apply, "threading", inline)
    original = replicate_module.replicate

    def replicate(network, devices, detach=False):
        replicas = original(network, devices, detach)
        # A replica's parameters are views of its device's flat copy; they are parameters
        # there (replica 0 holds the originals).
        for replica in replicas[1:]:
            for module in replica.modules():
                for t in getattr(module, "_former_parameters", {}).values():
                    if isinstance(t, torch.Tensor):
                        mark_parameter(t)
        return replicas

    patcher.set_everywhere([replicate_module, sys.modules["torch.nn.parallel.data_parallel"],
                            sys.modules["torch.nn.parallel"]], "replicate", replicate)
