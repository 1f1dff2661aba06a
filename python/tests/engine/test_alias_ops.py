"""`detach` and `alias` answered without FakeTensorMode (engine/alias_ops.py): only where its
answer cannot differ, with its metadata and on the input's storage."""

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
        assert not alias_ops.answered(aten.view.default, (x, [24]), {}, mode)[0]
        assert not alias_ops.answered(aten.detach.default, (x,), {}, None)[0]
        assert not alias_ops.answered(aten.detach.default, (torch.ones(2),), {}, mode)[0]
        constant = mode.from_tensor(torch.ones(()), static_shapes=True)
        constant.constant = torch.ones(())
        assert not alias_ops.answered(aten.detach.default, (constant,), {}, mode)[0]


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
