"""Deep copies of tensors made in a module's constructor (patches/torch_core.py): a real
tensor's copy is real there too (torchmetrics' `add_state` copies `torch.tensor(0.0)` made in
`MeanMetric.__init__`; it failed with "Attempted to set the storage of a tensor on device meta
to a storage on different device cpu"), fake ones copy as fake tensors, and a metric moved to
the GPU and an EMA copy of the model copy as on the GPU. A copy keeps its tensor's fake mode:
with a second mode (torch deep-copies the tensor's `__dict__`), `p.data = p.data.contiguous()`
on the EMA copy's parameters dropped their booking.

One trace of scripts/platform/deepcopy_states.py (needs torchmetrics)."""

import re

import pytest

from support.paths import TESTS
from support.ranks import model_state_bytes
from support.runs import run_script_on_h100

pytestmark = pytest.mark.slow  # traces in a fresh process

SCRIPT = TESTS / "scripts" / "platform" / "deepcopy_states.py"
F32 = 4
PSI = 256 * 256 + 256  # the Linear(256, 256)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return run_script_on_h100(tmp_path_factory.mktemp("deepcopy"), SCRIPT, "deepcopy")


def test_copies_keep_their_device_and_shape(traced):
    printed, _ = traced
    copies = re.findall(r"^COPY (\w+) (\S+) (.+)$", printed, re.M)
    assert copies == [("init_copy", "cpu", "(64, 256)"),          # copied in __init__, on host
                      ("metric_default", "cuda:0", "()"),         # moved with the module
                      ("ema_weight", "cuda:0", "(256, 256)"),
                      # after the first step; the trace ends at the second step's end
                      ("metric_copy", "cuda:0", "()")]
    assert "Accessing the data pointer of FakeTensor" not in printed


def test_the_ema_copy_holds_a_second_set_of_parameters(traced):
    _, snap = traced
    # The model's and the EMA copy's parameters (fp32; the copy's still booked after its
    # `p.data = p.data.contiguous()`), the model's gradients; SGD without momentum keeps no
    # state.
    assert model_state_bytes(snap) == {"parameter": 2 * PSI * F32, "gradient": PSI * F32,
                                       "optimizer_state": 0}
