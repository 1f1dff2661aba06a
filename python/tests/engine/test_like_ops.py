"""New tensors like their input answered without FakeTensorMode (engine/like_ops.py): only
where FakeTensorMode's answer cannot differ, with its metadata, and with the same trace."""

import pytest
import torch

from memlens import Tracer
from memlens.engine import like_ops
from support import adamw_step

aten = torch.ops.aten


def _meta(t: torch.Tensor) -> tuple:
    return type(t).__name__, t.shape, t.stride(), t.dtype, t.device, t.storage_offset()


def test_answers_are_fake_tensor_modes_where_given():
    with Tracer("cpu") as tracer:
        mode = tracer.fake_mode

        def fake(*shape, dtype=torch.float32):
            return mode.from_tensor(torch.ones(shape, dtype=dtype))

        def done(op, *args, **kwargs):
            """Whether the op is answered here; where it is, FakeTensorMode's answer has the
            same metadata, and the new tensors are new storages of the mode."""
            ok, out = like_ops.answered(op, args, kwargs, mode)
            if ok:
                with mode:
                    expected = op(*args, **kwargs)
                flat = out if isinstance(out, list) else [out]
                want = expected if isinstance(expected, list) else [expected]
                assert [_meta(t) for t in flat] == [_meta(t) for t in want], op
                assert all(t.fake_mode is mode for t in flat)
                inputs = {t.untyped_storage()._cdata for t in torch.utils._pytree.tree_leaves(
                    args) if isinstance(t, torch.Tensor)}
                assert not inputs & {t.untyped_storage()._cdata for t in flat}
            return ok

        x, a, same = fake(4, 3), [fake(4, 3), fake(5)], [fake(4, 3), fake(5)]
        assert done(aten.zeros_like.default, x, pin_memory=False,
                    memory_format=torch.preserve_format)
        assert done(aten.empty_like.default, x, dtype=torch.bfloat16)
        assert done(aten.ones_like.default, x)
        assert done(aten.empty_like.default, x.t(), memory_format=torch.contiguous_format)
        assert not done(aten.ones_like.default, x.t())  # preserve_format: FakeTensorMode's
        assert done(aten.full_like.default, x, 0.5)
        assert done(aten._foreach_sqrt.default, a)
        assert done(aten._foreach_add.List, a, same, alpha=2)
        assert done(aten._foreach_mul.Scalar, a, 0.5)
        assert done(aten._foreach_div.ScalarList, a, [0.1, 0.2])
        assert done(aten._foreach_addcdiv.Scalar, a, same, same, 0.5)
        # Where FakeTensorMode must answer: strides, layouts, devices, promotion, broadcasting
        assert not done(aten.zeros_like.default, x, memory_format=torch.channels_last)
        assert not done(aten.zeros_like.default, x, device="meta")
        assert not done(aten.zeros_like.default, x, pin_memory=True)
        assert not done(aten.zeros_like.default, torch.ones(4, 3))  # a host tensor
        assert not done(aten._foreach_sqrt.default, [fake(3, dtype=torch.long)])  # to float
        assert not done(aten._foreach_sqrt.default, [x.t()])  # not contiguous
        assert not done(aten._foreach_add.List, a, [fake(4, 1), fake(5)])  # broadcasting
        assert not done(aten._foreach_add.List, a, [fake(4, 3, dtype=torch.float64), fake(5)])
        assert not done(aten._foreach_mul.Tensor, a, fake())  # a 0-dim tensor operand
        assert not done(aten._foreach_sqrt_.default, a)  # in place: inplace_ops.py
        assert not done(aten._foreach_norm.Scalar, a)  # a reduction
        assert not like_ops.answered(aten.zeros_like.default, (x,), {}, None)[0]


def test_a_training_step_is_traced_the_same_with_the_fast_path(monkeypatch):
    """A foreach AdamW step (states made with zeros_like, `_foreach_sqrt` of the second
    moments): the same allocations, in the same order, with and without the fast path."""
    taken = []  # (op, tensors made) of each op answered (not the tensors: they would stay)

    def recording(*args):
        ok, out = like_ops.answered(*args)
        if ok:
            taken.append((args[0]._opname, len(out) if isinstance(out, list) else 1))
        return ok, out

    monkeypatch.setattr("memlens.engine.accountant.answered_like", recording)
    fast = adamw_step.allocations()
    # The traced step: backward's seed gradient, the 4 parameters' two moments, the sqrt of
    # the 4 second moments
    assert taken == [("ones_like", 1)] + [("zeros_like", 1)] * 8 + [("_foreach_sqrt", 4)]
    monkeypatch.setattr("memlens.engine.accountant.answered_like", lambda *args: (False, None))
    assert adamw_step.allocations() == fast


def test_an_invalid_foreach_op_still_fails_as_pytorch_says():
    message = r"The size of tensor a \(4\) must match the size of tensor b \(2\) at " \
              r"non-singleton dimension 0"
    with pytest.raises(RuntimeError, match=message):
        with Tracer("cpu"):
            torch._foreach_add([torch.ones(4, 3)], [torch.ones(2, 3)])
