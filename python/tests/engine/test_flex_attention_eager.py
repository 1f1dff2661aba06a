"""FlexAttention called eagerly (no torch.compile) runs torch's math implementation, which
makes the whole scores matrix: memlens runs that implementation inside its accountant
(patches/torch_compile.py, `_flex_attention_in`), forward and backward. Before, the operator
refused the accountant's mode ("There was no rule registered for HigherOrderOperator
flex_attention"), and torchtitan's context-parallel attention, which falls back to it, stopped."""

import json

import pytest

from support.paths import TESTS
from support.runs import real_and_traced_on_cpu

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "flex_attention_eager.py"
BATCH, HEADS, SEQ = 2, 4, 128
SCORES = BATCH * HEADS * SEQ * SEQ * 4  # one fp32 [B, H, L, S] scores matrix


def test_eager_flex_attention_peaks_where_the_cpu_allocator_peaks():
    real, est = real_and_traced_on_cpu(str(SCRIPT), ["--device", "cpu", "--no-dynamo"])
    assert est["peak_bytes"] == real["peak_bytes"]  # exact: the scores, logsumexp's copy, ...
    assert real["peak_bytes"] > 5 * SCORES


def test_eager_flex_attention_trains_on_a_gpu_target(memlens, tmp_path):
    snapshot = tmp_path / "flex.json"
    out = memlens("run", "--progress", "none", "--snapshot", str(snapshot), "--", str(SCRIPT),
                  "--device", "cuda", "--train")
    assert out.returncode == 0, out.stderr[-3000:]
    snap = json.loads(snapshot.read_text())
    allocations, ops = snap["allocations"], snap["ops"]
    made = [(ops[op], backward) for nbytes, op, backward in
            zip(allocations["requested_bytes"], allocations["op"], allocations["backward"])
            if nbytes == SCORES]
    # The math backward recomputes the scores of each layer: scores-sized fp32 tensors are made
    # in backward as well as in forward, in each of the two steps and two layers.
    assert sum(1 for _, backward in made if backward) >= 2 * 2
    assert sum(1 for _, backward in made if not backward) >= 2 * 2


def test_a_backward_can_make_a_constant_on_the_device(memlens, tmp_path):
    """Autograd runs backward in its own thread, which does not inherit FakeTensorMode's
    `only_lift_cpu_tensors`: `torch.tensor(x, device=...)` there made a real CUDA tensor."""
    script = tmp_path / "constant_in_backward.py"
    script.write_text(
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        two = torch.tensor(2.0, dtype=torch.float64, device=g.device)\n"
        "        print('constant on', two.device, flush=True)\n"
        "        return g * two\n"
        "torch.cuda.set_device(1)\n"
        "x = torch.randn(1024, device='cuda', requires_grad=True)\n"
        "Scale.apply(x).sum().backward()\n")
    snapshot = tmp_path / "s.json"
    out = memlens("run", "--gpus", "2", "--progress", "none", "--snapshot", str(snapshot),
                  str(script), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "constant on cuda:1" in out.stdout
    allocations = json.loads(snapshot.read_text())["allocations"]
    made = sorted((allocations["devices"][d], op) for d, nbytes, backward, op in
                  zip(allocations["device"], allocations["requested_bytes"],
                      allocations["backward"], allocations["op"]) if backward and nbytes == 8)
    # the host tensor torch.tensor fills, and its copy on the current device
    assert [device for device, _ in made] == ["cpu", "cuda:1"]
