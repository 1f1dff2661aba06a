"""`torch.tensor(data, device="cuda")` on CUDA's current device, as on a GPU.

Under FakeTensorMode torch's C++ data constructor fills in device 0 for a "cuda" without index,
where a GPU puts the tensor on the current device: rank 4 of a node that set cuda:4 got small
tensors (Megatron's loss scale, a flag reduced across ranks) on cuda:0, and the next op mixing
them failed with a device mismatch. Factories that take sizes (`torch.empty(..., device=
"cuda")`) are right already. Applied while a simulated GPU is active.

`torch.tensor([t0, t1, ...])` of one-element device tensors (Qwen2-VL's rotary deltas): torch's
data constructor reads each element's value with Python dispatch turned off, so a fake
element reached CUDA's `_local_scalar_dense`, which a trace has not ("Could not run
'aten::_local_scalar_dense' with arguments from the 'CUDA' backend"). Such elements are read
first, as `item()` reads them in a trace (their values where known, else placeholders).

Under a fake mode, `torch.tensor(data, device="cuda")` makes a host tensor and moves it through
the modes only where the thread's `only_lift_cpu_tensors` flag is set; FakeTensorMode sets it
on the thread that enters it, and autograd's device threads, which run every backward, do not
inherit it: a custom `autograd.Function` whose backward makes a constant on the device
(FlexAttention's eager backward) got a real CUDA tensor, which a trace cannot make. The flag
is set around each call where it is not.

TorchScript knows `torch.tensor` as a builtin by the function's identity; code it compiles at
import time (`torch.distributed.optim`'s functional optimizers) would otherwise try to compile
the wrapper's Python source and fail, so the wrappers are registered as the same builtins.
"""

from __future__ import annotations

import functools

import torch

from .patcher import Patcher, check_tested



def apply(patcher: Patcher) -> None:
    from torch.jit import _builtins

    check_tested("torch_cuda_device", torch.__version__)
    builtins = _builtins._get_builtin_table()  # built now, from the unpatched functions
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)
        wrapper = _on_current_device(original)
        patcher.setattr(torch, name, wrapper)
        if id(original) in builtins:
            builtins[id(wrapper)] = builtins[id(original)]
            patcher.defer(functools.partial(builtins.pop, id(wrapper), None))


def _read_fake_elements(data):
    """`data` with its one-element fake tensors (at any depth of lists) replaced by values."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(data, (list, tuple)):
        items = [_read_fake_elements(x) for x in data]
        return items if isinstance(data, list) else tuple(items)
    if isinstance(data, FakeTensor) and data.numel() == 1:
        return data.item()
    return data


def _on_current_device(factory):
    @functools.wraps(factory)
    def wrapper(*args, **kwargs):
        if args and isinstance(args[0], (list, tuple)):
            args = (_read_fake_elements(args[0]), *args[1:])
        device = kwargs.get("device")
        if device is not None:
            device = torch.device(device) if isinstance(device, str) else device
            if isinstance(device, torch.device) and device.type == "cuda" and device.index is None:
                kwargs["device"] = torch.device("cuda", torch.cuda.current_device())
        # (Dynamo traces this wrapper in a compiled region, where the flag is its own business)
        if torch.compiler.is_dynamo_compiling() or torch._C._only_lift_cpu_tensors():
            return factory(*args, **kwargs)
        torch._C._set_only_lift_cpu_tensors(True)  # this thread did not enter the fake mode
        try:
            return factory(*args, **kwargs)
        finally:
            torch._C._set_only_lift_cpu_tensors(False)

    return wrapper
