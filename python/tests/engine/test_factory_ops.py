"""New tensors made from sizes alone answered without FakeTensorMode (engine/factory_ops.py):
only where its answer cannot differ, with its metadata, and booked as before.

One fresh interpreter with the fake-CUDA shim (a CUDA target, two simulated GPUs)."""

import pytest
import torch

from memlens import Tracer
from memlens.engine import factory_ops
from support.runs import run_python

aten = torch.ops.aten

CASES = """
from memlens.cuda.build import ensure_fake_cuda_support
ensure_fake_cuda_support(device_count=2)
import torch
from memlens import Tracer
from memlens.engine import factory_ops

aten = torch.ops.aten
cuda, cuda1 = torch.device("cuda"), torch.device("cuda:1")
CALLS = {
    "empty on the current GPU": (aten.empty.memory_format, ([4, 3],), {"device": cuda}),
    "empty bf16 on GPU 1": (aten.empty.memory_format, ([4, 3],), {
        "dtype": torch.bfloat16, "device": cuda1, "pin_memory": False,
        "layout": torch.strided}),
    "empty channels_last": (aten.empty.memory_format, ([2, 3, 4, 5],), {
        "device": cuda, "memory_format": torch.channels_last}),
    "empty of no elements": (aten.empty.memory_format, ([0],), {"device": cuda}),
    "empty_strided transposed": (aten.empty_strided.default, ([4, 3], [1, 4]),
                                 {"device": cuda}),
    "empty_strided fp16": (aten.empty_strided.default, ([4, 3], [6, 1]),
                           {"dtype": torch.float16, "device": cuda}),
    "zeros int64": (aten.zeros.default, ([5],), {"dtype": torch.int64, "device": cuda}),
    "ones of the default dtype": (aten.ones.default, ([3, 3],), {"device": cuda}),
    "full of an int": (aten.full.default, ([2, 2], 7), {"device": cuda}),
    "full bf16": (aten.full.default, ([2, 2], 0.5), {"dtype": torch.bfloat16, "device": cuda}),
}


def meta(t):
    return [type(t).__name__, list(t.shape), list(t.stride()), t.storage_offset(), str(t.dtype),
            str(t.device), t.requires_grad, t.untyped_storage().nbytes()]


result = {}
with Tracer("h100-80gb", device_count=2) as tracer:
    mode = tracer.fake_mode
    for name, (op, args, kwargs) in CALLS.items():
        ok, out = factory_ops.answered(op, args, kwargs, mode)
        with mode:
            expected = op(*args, **kwargs)
        result[name] = [ok, ok and meta(out) == meta(expected) and out.fake_mode is mode]
    with torch.device("cuda"):
        layer = torch.nn.Linear(256, 512, dtype=torch.bfloat16)
        norm = torch.nn.LayerNorm(512)
    result["device"] = str(layer.weight.device)
    norm(layer(torch.ones(8, 256, device="cuda", dtype=torch.bfloat16)).float()).sum().backward()
result["peaks"] = tracer.snapshot()["summary"]["category_peaks"]
"""


@pytest.mark.slow  # a fresh interpreter with the fake-CUDA shim
def test_answers_are_fake_tensor_modes_and_a_model_is_booked_once():
    result = run_python(CASES)
    peaks = result.pop("peaks")
    assert result.pop("device") == "cuda:0"
    assert {name: v for name, v in result.items() if v != [True, True]} == {}
    assert len(result) == 10
    # bf16 weight and bias, fp32 LayerNorm weight and bias: each parameter and gradient once
    params = (512 * 256 + 512) * 2 + 2 * 512 * 4
    assert peaks["parameter"] == params and peaks["gradient"] == params


def test_what_is_left_to_fake_tensor_mode():
    with Tracer("cpu") as tracer:
        mode = tracer.fake_mode
        cpu = torch.device("cpu")

        def done(op, *args, **kwargs):
            return factory_ops.answered(op, args, kwargs, mode)[0]

        assert done(aten.empty.memory_format, [4, 3], device=cpu)
        # no device (a host tensor: host_compute decides), pinned, other layouts, a tensor fill
        # value, other ops, no mode
        assert not done(aten.empty.memory_format, [4, 3])
        assert not done(aten.empty.memory_format, [4], device=cpu, pin_memory=True)
        assert not done(aten.zeros.default, [4, 4], layout=torch.sparse_coo, device=cpu)
        assert not done(aten.full.default, [2], torch.ones(()), device=cpu)
        assert not done(aten.arange.default, 4, device=cpu)
        assert not factory_ops.answered(aten.empty.memory_format, ([4],), {"device": cpu},
                                        None)[0]


def test_a_replayed_blocks_tensor_is_made_past_every_mode():
    """`empty_strided` runs outside any mode's dispatch, where the accountant (or any mode) is
    still active: the meta tensor is the meta kernel's alone, not a mode's fake tensor that
    FakeTensor() would then detach through FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with FakeTensorMode() as mode, Log():
        t = factory_ops.empty_strided(mode, (4, 3), (1, 4), torch.bfloat16,
                                      torch.device("cpu"))
    assert seen == []
    assert type(t) is FakeTensor and t.fake_mode is mode
    assert (t.shape, t.stride(), t.dtype, t.device) == ((4, 3), (1, 4), torch.bfloat16,
                                                       torch.device("cpu"))
    assert t.untyped_storage().nbytes() == 12 * 2
