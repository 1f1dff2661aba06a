"""In-place ops answered without FakeTensorMode where its check cannot fail
(engine/inplace_ops.py): only those, and with the same trace."""

import pytest
import torch

from memlens import Tracer
from memlens.engine import inplace_ops
from support import adamw_step

aten = torch.ops.aten


def test_which_ops_qualify():
    assert inplace_ops.kind(aten._foreach_addcdiv_.Scalar) == "foreach"
    assert inplace_ops.kind(aten._foreach_lerp_.Scalar) == "foreach"
    for op in (aten.add_.Tensor, aten.mul_.Scalar, aten.normal_.default, aten.zero_.default,
               aten.copy_.default, aten.addcdiv_.default):
        assert inplace_ops.kind(op) == "single", op
    for op in (aten._foreach_sqrt.default, aten.add.Tensor,  # they allocate
               aten.resize_.default, aten.set_.source_Tensor, aten.unsqueeze_.default,
               aten.transpose_.default, aten.as_strided_.default):  # they change metadata
        assert inplace_ops.kind(op) is None, op


def test_answered_only_where_fake_tensor_mode_cannot_fail():
    with Tracer("cpu") as tracer:
        mode = tracer.fake_mode

        def fake(*shape, dtype=torch.float32):
            return mode.from_tensor(torch.ones(shape, dtype=dtype))

        def done(op, *args, **kwargs):
            ok, out = inplace_ops.answered(op, args, kwargs, mode)
            if ok and inplace_ops.kind(op) == "single":
                assert out is args[0]  # the updated tensor itself, as the op returns it
            return ok

        a, same = [fake(4, 3), fake(5)], [fake(4, 3), fake(5)]
        assert done(aten._foreach_add_.List, a, same, alpha=2)
        assert done(aten._foreach_mul_.Scalar, a, 0.5)
        assert done(aten._foreach_mul_.ScalarList, a, [0.1, 0.2])
        assert done(aten._foreach_mul_.Tensor, a, fake())  # a 0-dim tensor of the device
        assert not done(aten._foreach_add_.List, a, [fake(4, 1), fake(5)])  # broadcasting
        assert not done(aten._foreach_add_.List, a, [fake(4, 3, dtype=torch.float64), fake(5)])
        assert not done(aten._foreach_add_.List, a, [fake(4, 3)])  # lengths differ
        assert not done(aten._foreach_add_.Scalar, [fake(3, dtype=torch.long)], 0.5)
        assert not done(aten._foreach_add_.List, a, [torch.ones(4, 3), torch.ones(5)])  # host
        x = fake(4, 3)
        assert done(aten.normal_.default, x, 0.0, 0.02)
        assert done(aten.zero_.default, x)
        assert done(aten.add_.Tensor, x, fake(4, 3), alpha=2)
        assert done(aten.copy_.default, fake(4, 3, dtype=torch.bfloat16), x)  # a cast
        # Megatron DDP's hook: a bf16 gradient added into its fp32 main_grad (cast as read)
        assert done(aten.add_.Tensor, x, fake(4, 3, dtype=torch.bfloat16))
        assert done(aten.mul_.Tensor, x, fake(dtype=torch.float64))  # a 0-dim factor
        assert not done(aten.add_.Tensor, x, fake(4, 3, dtype=torch.long))  # not floating
        assert not done(aten.add_.Tensor, x, fake(3))  # broadcasting: FakeTensorMode checks
        assert not done(aten.add_.Tensor, x, torch.ones(4, 3))  # a host tensor
        assert not done(aten.add_.Tensor, fake(4, 3, dtype=torch.long), fake(4, 3,
                                                                           dtype=torch.long))
        assert not inplace_ops.answered(aten.zero_.default, (x,), {}, None)[0]  # another mode


def test_an_invalid_in_place_op_still_fails_as_pytorch_says():
    """Outside the fast path, FakeTensorMode's checks and errors are as before."""
    message = r"The size of tensor a \(4\) must match the size of tensor b \(2\) at " \
              r"non-singleton dimension 0"
    with pytest.raises(RuntimeError, match=message):
        torch._foreach_add_([torch.ones(4, 3)], [torch.ones(2, 3)])  # eager PyTorch
    with pytest.raises(RuntimeError, match=message):
        with Tracer("cpu"):
            torch._foreach_add_([torch.ones(4, 3)], [torch.ones(2, 3)])


def test_a_training_step_is_traced_the_same_with_the_fast_path(monkeypatch):
    """Initialisation and a foreach AdamW step: the same allocations, in the same order, with
    and without the fast path (the ops it takes allocate nothing either way)."""
    taken = []

    def recording(*args):
        taken.append(inplace_ops.answered(*args))
        return taken[-1]

    monkeypatch.setattr("memlens.engine.accountant.answered", recording)
    fast = adamw_step.allocations()
    done = [out for out in taken if out[0]]
    assert len(done) >= 4 + 4  # the parameters' initialisation, the step's foreach updates
    monkeypatch.setattr("memlens.engine.accountant.answered", lambda *args: (False, None))
    assert adamw_step.allocations() == fast
