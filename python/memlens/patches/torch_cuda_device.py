"""`torch.tensor(data, device="cuda")` on CUDA's current device, as on a GPU.

Under FakeTensorMode torch's C++ data constructor fills in device 0 for a "cuda" without index,
where a GPU puts the tensor on the current device: rank 4 of a node that set cuda:4 got small
tensors (Megatron's loss scale, a flag reduced across ranks) on cuda:0, and the next op mixing
them failed with a device mismatch. Factories that take sizes (`torch.empty(..., device=
"cuda")`) are right already. Applied while a simulated GPU is active.
"""

from __future__ import annotations

import functools

import torch

from .patcher import Patcher, check_tested



def apply(patcher: Patcher) -> None:
    check_tested("torch_cuda_device", torch.__version__)
    for name in ("tensor", "as_tensor"):
        patcher.setattr(torch, name, _on_current_device(getattr(torch, name)))


def _on_current_device(factory):
    @functools.wraps(factory)
    def wrapper(*args, **kwargs):
        device = kwargs.get("device")
        if device is not None:
            device = torch.device(device) if isinstance(device, str) else device
            if isinstance(device, torch.device) and device.type == "cuda" and device.index is None:
                kwargs["device"] = torch.device("cuda", torch.cuda.current_device())
        return factory(*args, **kwargs)

    return wrapper
