"""Patches of core torch that make unmodified training scripts run under FakeTensorMode.

- `torch.utils.swap_tensors`: `module.to(dtype)`, `.half()`, `.cuda()` on a module whose
  parameters are fake tensors always swap (`Module._apply` picks swapping for FakeTensor
  parameters), and the swap refuses tensors with weakrefs (fake mode keeps some). Falling back
  to assigning `.data` has the same effect for a module. Called from `Module._apply`, the swap
  is replaced by what `_apply` does to real parameters (`param.data = param_applied`): a swap
  would leave the old storage in `param_applied` until the next parameter has been converted,
  one parameter's old copy longer than a real run keeps it. Where `.data` cannot take the new
  tensor (`to_empty(device="cuda")` of a model built on the meta device: meta and CUDA tensors
  are of incompatible kinds; a DTensor parameter), the tensors are swapped as torch would,
  without its refusal of weakrefs: the weakrefs on a fake parameter are FakeTensorMode's own
  memo (MetaConverter.tensor_memo, a WeakValueDictionary), whose entry then names the
  swapped object, as the module does.
- `torch.get_rng_state` (and `torch.random.get_rng_state`): activation checkpointing saves the
  CPU generator state, a real tensor made without any op, so the accountant would not see it.
- `torch.UntypedStorage.resize_`: resizing a storage directly is no op a dispatch mode sees, and
  FSDP frees and re-allocates unsharded parameters that way (`resize_(0)`, `resize_(n)`; FSDP1
  through `TypedStorage._resize_`, which calls it).
- `torch.Tensor.__format__`: `f"{loss:.4f}"` formats a 0-dim tensor's value only for exact
  Tensors; a fake one reads its (placeholder) value the same way.
- `torch.isfinite` (and the method): composite, so the accountant never sees it; its result
  is handed to `on_finite_check` (engine/healthy_values.py: a healthy run's, all finite).
- `Tensor.__deepcopy__`, `nn.Parameter.__deepcopy__`: an EMA model (`copy.deepcopy(model)`, `AveragedModel`) holds
  parameters that may never run a forward, where the classifier finds a model's; each copy is
  handed to `on_parameter_copy` (a parameter, from birth). A real host tensor's copy is real:
  `Tensor.__deepcopy__` makes the new tensor from nothing (`new_empty`) and sets the copied
  storage into it, which in a module's constructor (torchmetrics' `add_state`) would make it
  fake and fail ("set the storage of a tensor on device meta to a storage on ... cpu").
- the foreach "supported types" lists of torch.optim and torch.utils: optimizers and
  clip_grad_norm_ take their multi-tensor (foreach) path only for exact Tensor/Parameter types,
  so fake parameters would silently take the per-tensor path a real run does not take.
"""

from __future__ import annotations

import copyreg
import sys
import warnings

import torch

from .patcher import Patcher, check_tested



def _set_data(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """`t1.data = t2`, and for fake tensors also the device they keep as a Python attribute
    (which `.data` leaves alone: `.cuda()` would otherwise leave them on the CPU)."""
    with torch.no_grad():
        t1.data = t2.detach()
    if hasattr(t1, "fake_device"):
        t1.fake_device = t2.fake_device


def _swap_despite_weakrefs(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """`torch.utils.swap_tensors` without its weakref check (see the module's docstring)."""
    slots = set(copyreg._slotnames(t1.__class__))  # type: ignore[attr-defined]
    if slots != set(copyreg._slotnames(t2.__class__)):  # type: ignore[attr-defined]
        raise RuntimeError("Cannot swap t1 and t2 if they have different slots")
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    missing = object()
    for slot in slots:
        a, b = getattr(t1, slot, missing), getattr(t2, slot, missing)
        for t, value in ((t1, b), (t2, a)):
            if value is missing:
                if hasattr(t, slot):
                    delattr(t, slot)
            else:
                setattr(t, slot, value)
    torch._C._swap_tensor_impl(t1, t2)


def _assign(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """Make t1 hold t2's tensor: by `.data` where the kinds allow it, else by swapping."""
    if torch._has_compatible_shallow_copy_type(t1, t2):
        _set_data(t1, t2)
    else:
        _swap_despite_weakrefs(t1, t2)


def _noting_parameter_copies(original, on_parameter_copy, copying_real):
    from torch._subclasses.fake_tensor import FakeTensor

    def __deepcopy__(self, memo):
        if type(self) in (torch.Tensor, torch.nn.Parameter) and self.device.type == "cpu" \
                and not isinstance(self, FakeTensor):
            with copying_real():  # a real tensor's copy is real (its storage is copied)
                copied = original(self, memo)
        else:
            if isinstance(self, FakeTensor) and memo is not None:
                # The copy keeps its tensor's fake mode: torch deep-copies the tensor's
                # `__dict__`, and so the mode, into a second FakeTensorMode, and then the
                # copy's `.data` is a new tensor of that mode, not a view of the copy:
                # `p.data = p.data.contiguous()` (PEFT's modules_to_save) dropped its storage.
                memo.setdefault(id(self.fake_mode), self.fake_mode)
            with warnings.catch_warnings():
                # torch's own deepcopy asks a fake tensor for its data pointer (to take the
                # clone path); the warning is about torch's code, not the script's.
                warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
                copied = original(self, memo)
        if isinstance(copied, torch.nn.Parameter):
            on_parameter_copy(copied)
        return copied
    return __deepcopy__


def apply(patcher: Patcher, on_external_tensor, on_storage_resized, on_finite_check,
          on_parameter_copy, copying_real) -> None:
    """`copying_real()`: a context in which the accountant runs host ops for real (a real
    tensor being deep-copied)."""
    check_tested("torch_core", torch.__version__)
    original_swap = torch.utils.swap_tensors

    def swap_tensors(t1, t2):
        caller = sys._getframe(1)
        if (caller.f_code.co_name == "_apply" and isinstance(t1, torch.Tensor)
                and caller.f_globals.get("__name__") == "torch.nn.modules.module"):
            _assign(t1, t2)  # the real-tensor path of Module._apply
            return None
        try:
            return original_swap(t1, t2)
        except RuntimeError as e:
            if "weakref" not in str(e) or not isinstance(t1, torch.Tensor):
                raise
            old = t1.detach()
            _set_data(t1, t2)
            _set_data(t2, old)

    patcher.setattr(torch.utils, "swap_tensors", swap_tensors)

    original_rng = torch.get_rng_state

    def get_rng_state():
        state = original_rng()
        on_external_tensor(state, "get_rng_state")
        return state

    patcher.setattr(torch, "get_rng_state", get_rng_state)
    patcher.setattr(torch.random, "get_rng_state", get_rng_state)

    original_resize = torch.UntypedStorage.resize_

    def resize_(storage, size):
        out = original_resize(storage, size)
        on_storage_resized(storage)
        return out

    patcher.setattr(torch.UntypedStorage, "resize_", resize_)

    from torch._subclasses.fake_tensor import FakeTensor

    original_format = torch.Tensor.__format__

    def __format__(self, format_spec):
        if isinstance(self, FakeTensor) and self.dim() == 0:
            return self.item().__format__(format_spec)
        return original_format(self, format_spec)

    patcher.setattr(torch.Tensor, "__format__", __format__)

    def finite_check(original):
        def isfinite(*args, **kwargs):
            out = original(*args, **kwargs)
            if isinstance(out, FakeTensor):
                on_finite_check(out)
            return out
        return isfinite

    # A fake parameter is a FakeTensor marked `_is_param` (nn.Parameter's isinstance check
    # reads the mark): it is copied by Tensor.__deepcopy__, not Parameter.__deepcopy__.
    for owner in (torch.Tensor, torch.nn.Parameter):
        patcher.setattr(owner, "__deepcopy__", _noting_parameter_copies(
            owner.__dict__["__deepcopy__"], on_parameter_copy, copying_real))

    patcher.setattr(torch, "isfinite", finite_check(torch.isfinite))
    patcher.setattr(torch.Tensor, "isfinite", finite_check(torch.Tensor.isfinite))

    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    patcher.append(optimizer._foreach_supported_types, FakeTensor)
    patcher.append(_foreach_utils._foreach_supported_types, FakeTensor)
