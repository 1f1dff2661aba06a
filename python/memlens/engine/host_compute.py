"""Which ops run for real on the host, and which run fake.

What a training script computes *with* on the host is real: its data pipeline (DataLoader
iterators and their seeds, samplers' permutations, collate, `torch.randint` indices into a numpy
memmap), its bookkeeping (metric counters, `torch.tensor(list)`) — small, cheap, and its values
steer the script (a sampler's `.tolist()`, an index into a memmap). What becomes model state or
reaches the simulated device is fake: any op with a fake input, any op that makes a tensor on
a device other than the CPU, and any tensor made while an `nn.Module` is being constructed (a
model built on the CPU and then moved with `.to("cuda")` allocates nothing real, whatever its
size). A host tensor larger than `MAX_REAL_FACTORY_BYTES` made from nothing is fake too: a
synthetic data set of gigabytes would cost real memory for values that decide nothing.

Real ops are booked into the ledger like fake ones (their bytes are the script's host memory).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

MAX_REAL_FACTORY_BYTES = 64 * 1024 * 1024
_MODULE_INIT_DEPTH = 64  # frames searched for an nn.Module.__init__


def _tensors_in(values, found: list) -> None:
    """Append the tensors among `values` (and in their lists and tuples) to `found`."""
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            _tensors_in(v, found)


def _host_device(device) -> bool:
    if device is None:
        return True
    return torch.device(device).type == "cpu"


def constructing_module(frame) -> bool:
    """Whether an `nn.Module.__init__` (or a function it called) is running.

    The class is found from the code's qualified name and the frame's globals, never from
    `frame.f_locals`: on Python < 3.13 reading f_locals of a running frame snapshots its
    locals into a dict the frame keeps, which would hold the script's tensors alive (and
    shift every free after it)."""
    for _ in range(_MODULE_INIT_DEPTH):
        if frame is None:
            return False
        if frame.f_code.co_name == "__init__" and _is_module_init(frame):
            return True
        frame = frame.f_back
    return False


def _is_module_init(frame) -> bool:
    qualname = getattr(frame.f_code, "co_qualname", None)  # Python 3.11+
    if qualname is None or "<locals>" in qualname:
        # A class defined inside a function (or Python 3.10): only the frame knows it.
        return isinstance(frame.f_locals.get("self"), torch.nn.Module)
    owner: object = frame.f_globals
    for part in qualname.split(".")[:-1]:
        owner = owner.get(part) if isinstance(owner, dict) else getattr(owner, part, None)
    return isinstance(owner, type) and issubclass(owner, torch.nn.Module)


def _factory_bytes(func, args, kwargs) -> int:
    """The bytes a factory op's result would take, from its size argument (0 if unknown)."""
    size = None
    for a in args:
        if isinstance(a, (list, tuple)) and all(isinstance(d, int) for d in a):
            size = a
            break
    if size is None:
        size = kwargs.get("size")
    if not isinstance(size, (list, tuple)):
        return 0
    n = 1
    for d in size:
        n *= d if isinstance(d, int) else 1
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    try:
        return n * dtype.itemsize
    except AttributeError:
        return n


def runs_on_host(func, types, args, kwargs, caller_frame, copying_real: bool = False) -> bool:
    """Whether `func(*args, **kwargs)` should run for real (see the module docstring).
    `copying_real`: the op is part of copying a real tensor (`copy.deepcopy`, which makes its
    new tensor from nothing with `new_empty` and sets a real storage into it): a copy of a real
    tensor is real, in a module's constructor too."""
    for t in types:
        if t is not torch.Tensor and t is not torch.nn.Parameter:
            return False  # a fake tensor, or a subclass (DTensor) whose own dispatch decides
    tensors: list = []
    _tensors_in(args, tensors)
    _tensors_in(kwargs.values(), tensors)
    if any(isinstance(t, FakeTensor) for t in tensors):
        return False
    if not _host_device(kwargs.get("device")):
        return False
    if tensors:
        # Real host tensors in, host tensor out. (Ops that move them to the simulated device
        # name the device, above.)
        return True
    if copying_real:
        return True
    # A tensor made from nothing: real unless it is model state in the making or large.
    if _factory_bytes(func, args, kwargs) > MAX_REAL_FACTORY_BYTES:
        return False
    return not constructing_module(caller_frame)
