"""`detach`, `alias` and views answered without FakeTensorMode (engine/alias_ops.py): only where
its answer cannot differ, with its metadata and on the input's storage."""

import pytest

import torch

from memlens import Tracer
from memlens.engine import alias_ops

aten = torch.ops.aten


def _meta(t: torch.Tensor) -> tuple:
    return (type(t).__name__, t.shape, t.stride(), t.storage_offset(), t.dtype, t.device,
            t.requires_grad, t.untyped_storage()._cdata)


def test_an_alias_is_fake_tensor_modes_answer_on_the_same_storage():
    with Tracer("cpu") as tracer:
        mode = tracer.fake_mode
        x = mode.from_tensor(torch.ones(6, 4))
        views = {"plain": x, "transposed": x.t(), "offset": x[2:, 1:],
                 "bf16": mode.from_tensor(torch.ones(3, 5, dtype=torch.bfloat16))}
        for name, t in views.items():
            for op in (aten.detach.default, aten.alias.default):
                ok, out = alias_ops.answered(op, (t,), {}, mode)
                assert ok, (name, op)
                with mode:
                    expected = op(t)
                assert _meta(out) == _meta(expected), (name, op)
                assert out.fake_mode is mode and out is not t
                assert out.untyped_storage()._cdata == t.untyped_storage()._cdata

        # Left to FakeTensorMode: another op, another mode, a host tensor, a constant, keywords.
        assert not alias_ops.answered(aten.clone.default, (x,), {}, mode)[0]
        assert not alias_ops.answered(aten.detach.default, (x,), {}, None)[0]
        assert not alias_ops.answered(aten.detach.default, (torch.ones(2),), {}, mode)[0]
        constant = mode.from_tensor(torch.ones(()), static_shapes=True)
        constant.constant = torch.ones(())
        assert not alias_ops.answered(aten.detach.default, (constant,), {}, mode)[0]


VIEWS = {
    "view": (aten.view.default, lambda x: (x, [4, 6])),
    "view of a transposed": (aten.view.default, lambda x: (x.t(), [24])),  # refused: its error
    "_unsafe_view": (aten._unsafe_view.default, lambda x: (x, [2, 12])),
    "t": (aten.t.default, lambda x: (x,)),
    "transpose": (aten.transpose.int, lambda x: (x, 0, 1)),
    "permute": (aten.permute.default, lambda x: (x.view(2, 3, 4), [2, 0, 1])),
    "expand": (aten.expand.default, lambda x: (x[:1], [5, 4])),
    "unsqueeze": (aten.unsqueeze.default, lambda x: (x, 1)),
    "squeeze": (aten.squeeze.dim, lambda x: (x[:1], 0)),
    "slice": (aten.slice.Tensor, lambda x: (x, 1, 1, 3)),
    "slice with a step": (aten.slice.Tensor, lambda x: (x, 0, 0, None, 2)),
    "select": (aten.select.int, lambda x: (x, 0, 3)),
    "as_strided": (aten.as_strided.default, lambda x: (x, [3, 2], [1, 3], 2)),
}


@pytest.mark.parametrize("name", VIEWS)
def test_a_view_is_fake_tensor_modes_answer_on_the_same_storage(name):
    op, make_args = VIEWS[name]
    with Tracer("cpu") as tracer:
        mode = tracer.fake_mode
        x = mode.from_tensor(torch.ones(6, 4, dtype=torch.bfloat16))
        args = make_args(x)
        ok, out = alias_ops.answered(op, args, {}, mode)
        try:
            with mode:
                expected = op(*args)
        except (RuntimeError, ValueError):  # (ValueError: view's)
            assert name == "view of a transposed" and not ok  # FakeTensorMode raises
            return
        assert ok
        assert _meta(out) == _meta(expected) and out.fake_mode is mode
        assert out.untyped_storage()._cdata == x.untyped_storage()._cdata
        # keywords and symbolic or tensor arguments are FakeTensorMode's
        assert not alias_ops.answered(op, args, {"implicit": False}, mode)[0]


def test_a_parameter_made_in_the_trace_is_a_fake_parameter_on_its_storage():
    """nn.Parameter detaches its data (twice, for a fake tensor): the parameter is booked once."""
    with Tracer("cpu") as tracer:
        layer = torch.nn.Linear(16, 32)
        weight = layer.weight
        assert isinstance(weight, torch.nn.Parameter) and weight.requires_grad
        assert (weight.shape, weight.stride(), weight.device.type) == ((32, 16), (16, 1), "cpu")
        layer(torch.ones(4, 16)).sum().backward()
        assert layer.weight.grad.shape == (32, 16)
    # 32 x 16 + 32 fp32 parameters and their gradients: nothing booked twice for the aliases.
    summary = tracer.snapshot()["summary"]
    assert summary["category_peaks"]["parameter"] == (32 * 16 + 32) * 4
    assert summary["category_peaks"]["gradient"] == (32 * 16 + 32) * 4
