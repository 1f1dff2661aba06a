"""torch.compile on a CUDA target (h100-80gb): Inductor's GPU code needs Triton and a GPU, so a
region is AOTAutograd's partitioned graphs run op by op. What those graphs save for backward
must be what Inductor's partitioner saves: checked against the partitioner run here, directly,
on the joint graph of the same model."""

import json
import sys

import pytest
import torch

from support.paths import TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

CASE = TESTS / "cases" / "compiled_case.py"
sys.path.insert(0, str(CASE.parent))
import compiled_case  # noqa: E402  (its models; the training loop runs only as a script)


def partitioner_saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Dynamo's graph of the model (activation checkpointing becomes a tagged region there)
    through AOTAutograd with Inductor's decompositions and its partition function (joint-graph
    passes + min-cut), on the CPU: the bytes of the values the backward graph receives that are
    neither the model's inputs and parameters (`primals_*`) nor the incoming gradients."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.compile_fx import partition_fn
    from torch._inductor.decomposition import select_decomp_table

    saved: list[int] = []

    def backward(gm, inputs):
        saved.append(sum(n.meta["val"].numel() * n.meta["val"].element_size()
                         for n in gm.graph.find_nodes(op="placeholder")
                         if not n.name.startswith(("primals", "tangents"))))
        return gm

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, inputs: gm, bw_compiler=backward,
                           partition_fn=partition_fn, decompositions=select_decomp_table())
    torch.compile(model, backend=backend)(x).float().pow(2).mean().backward()
    assert len(saved) == 1
    return saved[0]


def traced(memlens, model: str, how: str) -> dict:
    out = memlens("run", "--json", "--no-snapshot", "--", str(CASE), "--model", model,
                  "--device", "cuda", "--how", how)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def fwbw_peak(data: dict) -> int:
    return next(p["peak_bytes"] for p in data["phases"]
                if p["name"] == "forward_backward_iter_1" and p["device"] == "cuda:0")


@pytest.mark.parametrize("name", ["mlp", "gpt-checkpoint"])
def test_saved_for_backward_is_what_the_partitioner_saves(memlens, name):
    torch.manual_seed(0)
    model, make_input = compiled_case.build(name)
    expected = partitioner_saved_bytes(model, make_input())
    if name == "mlp":
        # fc1 and fc2 outputs before and after GELU, 16 x 256 fp32 each: 4 x 16 KiB.
        assert expected == 4 * 16 * 256 * 4

    data = traced(memlens, name, "module")
    region, = data["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == \
        ("partitioner", 1, 0)
    assert region["saved_bytes"] == expected
    assert any("fusion and buffer reuse are not" in n for n in data["notes"])


def test_a_compiled_function_warmed_up_before_the_model_is_not_taken_for_it(memlens):
    """The warm-up runs the compiled function's graph, a GraphModule, at top level: it must not
    pass for the script's model (the trace then stopped after two warm-up calls, before the
    model existed). The model's states: 2 x 1024 x 4096 weights + 4096 + 1024 biases =
    8,393,728 fp32 parameters: 4 B each for parameters, 8 B for AdamW's two moments."""
    out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--",
                  str(TESTS / "scripts" / "compiled_warmup.py"))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    params = 2 * (1024 * 4096) + 4096 + 1024
    assert [p["name"] for p in data["phases"] if p["device"] == "cuda:0"] == [
        "setup_model_and_optimizer", "forward_backward_iter_0", "optimizer_step_iter_0",
        "forward_backward_iter_1", "optimizer_step_iter_1"]
    states = data["categories_at_peak"]
    assert states["parameter"] == states["gradient"] == 4 * params == 33_574_912
    assert states["optimizer_state"] == 8 * params
