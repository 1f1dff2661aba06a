"""Values read out of fake tensors through paths torch refuses for tensor subclasses.

`Tensor.numpy()` (and `np.asarray(t)`, `np.array(t)`, which call `Tensor.__array__` and so
`numpy()`) raises "not supported for tensor subclasses" for a FakeTensor: there is no data to
hand over. Evaluation and metric code does it with results it only logs (the Hugging Face
Trainer turns the gathered evaluation losses into a numpy array to average them). A fake tensor
answers an array of zeros of its shape and dtype instead, with a placeholder note at the line;
the checks a real tensor fails first (on the GPU, requires grad, no numpy dtype) still fail.

Pickling a FakeTensor (`torch.save` of a state dict or an optimizer's state: checkpointing)
fails on the fake mode it holds. It is pickled as the meta tensor of its shape, dtype, stride
and `requires_grad`, as torch pickles a meta tensor: the checkpoint records what would be saved
and holds no bytes (`torch.load` gives meta tensors back).
"""

from __future__ import annotations

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor

from .patcher import Patcher, check_tested


_NUMPY_DTYPES = {
    torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
    torch.complex128: np.complex128, torch.complex64: np.complex64, torch.int64: np.int64,
    torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def apply(patcher: Patcher, on_placeholder) -> None:
    """`on_placeholder(op, value)`: a value was made up for the script (noted at its line)."""
    check_tested("torch_values", torch.__version__)
    original = torch.Tensor.numpy

    def numpy(self, *, force: bool = False):
        if not isinstance(self, FakeTensor):
            return original(self, force=force)
        if self.device.type != "cpu" and not force:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use "
                            "Tensor.cpu() to copy the tensor to host memory first.")
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        dtype = _NUMPY_DTYPES.get(self.dtype)
        if dtype is None:
            raise TypeError(f"Got unsupported ScalarType {str(self.dtype).split('.')[1]}")
        on_placeholder("numpy", 0)
        return np.zeros(tuple(self.shape), dtype=dtype)

    patcher.setattr(torch.Tensor, "numpy", numpy)

    def reduce_ex(self, proto):
        on_placeholder("pickle", "meta")
        return (torch._utils._rebuild_meta_tensor_no_storage,
                (self.dtype, tuple(self.size()), self.stride(), self.requires_grad))

    patcher.setattr(FakeTensor, "__reduce_ex__", reduce_ex)
