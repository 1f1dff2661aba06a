"""The fast paths' fake tensors (engine/fake_tensors.py) are the ones FakeTensor() makes: the
same type, dispatch keys, fields and device, and the same refusal to hand out a data pointer."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorConfig, FakeTensorMode

from memlens.engine import fake_tensors
from memlens.engine.fake_tensors import make_fake


def _meta(shape=(4, 3), dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def _made_by_fake_tensor(monkeypatch) -> list:
    """Each FakeTensor() call from here on, by the device it was given."""
    calls = []
    original = FakeTensor.__new__

    def counting(cls, *args, **kwargs):
        calls.append(str(args[2]))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(FakeTensor, "__new__", staticmethod(counting))
    return calls


def _data_ptr(t) -> str:
    """What reading the data pointer does: refused, or allowed (with a warning PyTorch gives
    once a process)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            t.untyped_storage().data_ptr()
        except RuntimeError:
            return "refused"
    return "allowed"


def _same(a: FakeTensor, b: FakeTensor) -> bool:
    return type(a) is type(b) and torch._C._dispatch_keys(a) == torch._C._dispatch_keys(b) \
        and a.__dict__ == b.__dict__ and a.device == b.device and a.fake_mode is b.fake_mode \
        and (a.shape, a.stride(), a.dtype) == (b.shape, b.stride(), b.dtype)


@pytest.mark.parametrize("unsafe", [False, True])
@pytest.mark.parametrize("device", ["cpu", "cuda:0", "cuda:1", "cuda"])
def test_made_as_fake_tensor_makes_it(monkeypatch, device, unsafe):
    mode = FakeTensorMode()
    mode._allow_unsafe_data_ptr_access = unsafe
    device = torch.device(device)
    expected = FakeTensor(mode, _meta(), device)
    calls = _made_by_fake_tensor(monkeypatch)
    first, second, third = (make_fake(mode, _meta(), device) for _ in range(3))
    # the first made by FakeTensor() (and checked against one made the fast way), the rest fast
    assert len(calls) == 1
    for t in (first, second, third):
        assert _same(t, expected)
        assert _data_ptr(t) == _data_ptr(expected) == ("allowed" if unsafe else "refused")
    assert second.untyped_storage() is not third.untyped_storage()
    assert str(third.device) == ("cuda:0" if device == torch.device("cuda") else str(device))


def test_what_it_cannot_copy_is_made_by_fake_tensor(monkeypatch):
    """With FakeTensor's debug traces on, each tensor has its own: no fields are copied."""
    mode = FakeTensorMode()
    monkeypatch.setattr(FakeTensorConfig, "debug", True)
    calls = _made_by_fake_tensor(monkeypatch)
    made = [make_fake(mode, _meta(), torch.device("cpu")) for _ in range(3)]
    assert len(calls) == 3
    assert all(hasattr(t, "_debug_trace") for t in made)
    assert mode.__dict__[fake_tensors._FIELDS] == {torch.device("cpu"): None}


def test_each_mode_learns_its_own_fields():
    one, other = FakeTensorMode(), FakeTensorMode()
    for mode in (one, other, one, other):
        t = make_fake(mode, _meta(), torch.device("cpu"))
        assert t.fake_mode is mode
