"""Parameter subclasses made from fake tensors (bitsandbytes' Params4bit and Int8Params).

`torch.Tensor._make_subclass(cls, data)` gives `data`'s storage a new Python object of class
`cls`; a fake tensor's storage already has one (the FakeTensor), so torch refuses. torch's own
`nn.Parameter(fake)` returns the fake tensor detached and marked `_is_param` instead; a library
class needs its own methods and attributes too. While the trace runs, `_make_subclass` of a
Parameter subclass from a fake tensor returns `data.detach()` with its class changed to one
that derives from FakeTensor first (its dispatch, and torch function disabled as FakeTensor
disables it) and from `cls` (bitsandbytes' methods, `isinstance(w, Params4bit)`).
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch._subclasses.fake_tensor import FakeTensor

_FAKE_CLASSES: dict[type, type] = {}  # library class -> its fake class
_LIBRARY_CLASS: dict[type, type] = {}  # and back


_TENSOR_DATA = torch._C.TensorBase.data


def _get_data(self):
    return _TENSOR_DATA.__get__(self)


def _set_data(self, value) -> None:
    # bitsandbytes quantizes by `self.data = packed` (on the GPU): a fake tensor keeps its
    # device as a Python attribute, which `.data =` leaves alone (patches/torch_core.py).
    _TENSOR_DATA.__set__(self, value)
    if isinstance(value, FakeTensor):
        self.fake_device = value.fake_device


_DATA = property(_get_data, _set_data)


def fake_class(cls: type) -> type:
    """The class of a fake `cls` parameter: FakeTensor first, then `cls`. Making one
    (`type(w)(data=...)`, copy.deepcopy) goes through the library's `__new__`, not
    FakeTensor's."""
    if cls not in _FAKE_CLASSES:
        fake = type(f"Fake{cls.__name__}", (FakeTensor, cls),
                    {"__module__": cls.__module__, "__new__": cls.__new__, "data": _DATA})
        _FAKE_CLASSES[cls], _LIBRARY_CLASS[fake] = fake, cls
    return _FAKE_CLASSES[cls]


def is_fake_library_param(t) -> bool:
    return type(t) in _LIBRARY_CLASS


def install_fake_params(patcher) -> None:
    original = torch.Tensor._make_subclass

    def _make_subclass(cls, data, require_grad=False, *args, **kwargs):
        cls = _LIBRARY_CLASS.get(cls, cls)
        if isinstance(data, FakeTensor) and not issubclass(cls, FakeTensor) and \
                issubclass(cls, torch.nn.Parameter):
            param = data.detach()
            param.__class__ = fake_class(cls)
            param.requires_grad_(require_grad)
            param._is_param = True
            return param
        return original(cls, data, require_grad, *args, **kwargs)

    patcher.setattr(torch.Tensor, "_make_subclass", staticmethod(_make_subclass))


def tolerate_fake_bookkeeping(patcher, cls: type) -> None:
    """transformers re-makes a quantized parameter as `Params4bit(value, **old.__dict__)`; a
    fake one's `__dict__` also holds FakeTensor's own bookkeeping (fake_mode, _fake_device,
    its memos) and the `_is_param` mark `_make_subclass` above sets. bitsandbytes 0.50's
    `__new__` takes **kwargs and ignores them; 0.49's does not: there the names a fake tensor
    sets on itself, and `__new__` does not take, are dropped."""
    original = cls.__dict__["__new__"].__func__
    params = inspect.signature(original).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return

    @functools.wraps(original)
    def __new__(klass, data=None, *args, **kwargs):
        if isinstance(data, FakeTensor):
            for name in {*vars(data), "_is_param"} - set(params):
                kwargs.pop(name, None)
        return original(klass, data, *args, **kwargs)

    patcher.setattr(cls, "__new__", staticmethod(__new__))


def apply_keeping_fake_params(original_apply):
    """`Module._apply` (`.cuda()`, `.to()`, `.half()`) for a module holding such parameters.
    torch swaps a fake parameter for `nn.Parameter(fn(param))` (swap_tensors), which would turn
    a Params4bit back into a plain fake tensor and lose its quantization state; on a GPU the
    parameter's own `.to()` (quantizing as it moves) is kept, its data set in place. So here:
    the library's parameters are applied as on a GPU, the rest of the module by torch."""

    def _apply(self, fn, recurse=True):
        held = {k: p for k, p in self._parameters.items() if is_fake_library_param(p)}
        if not held:
            return original_apply(self, fn, recurse)
        order = list(self._parameters)
        for k in held:
            del self._parameters[k]
        try:
            original_apply(self, fn, recurse)
        finally:
            others = dict(self._parameters)
            self._parameters.clear()
            self._parameters.update({k: held[k] if k in held else others[k] for k in order})
        for param in held.values():
            with torch.no_grad():
                applied = fn(param)
            if applied is not param:
                param.data = applied
        return self

    return _apply
