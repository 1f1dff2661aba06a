"""Megatron's Transformer Engine CUDA graphs (TECudaGraphHelper, `--cuda-graph-impl
transformer_engine`) without TE: memlens' stand-in for TE 2.10's make_graphed_callables
(plugins/megatron/te_graphs.py) captures every layer and micro-batch after one eager step, and
the next step replays them.

The script's GPT (h = 256, s = 128, b = 2, bf16, local layers with biases) has two layers. What
TE's capture keeps once it is done, with its buffer reuse (TE >= 2.7, as Megatron asks it):
- each layer's sample inputs, which Megatron makes: the hidden states [s, b, h] (131,072 B) and
  the attention mask [b, 1, s, s] bool (32,768 B);
- one set of output gradients, shared by every backward capture of the same shape (131,072 B);
- the input and parameter gradients of the chunk's first layer (layer 0), whose backward comes
  last: [s, b, h] (131,072 B) and its parameters' (1,579,520 B); layer 1's were let go (TE's
  weak references) once layer 0's backward was captured, and so were both layers' outputs;
- PyTorch's cuBLAS workspaces of the two new streams, each for forward and for autograd's
  thread: 4 x 32 MiB (the warm-up's side stream, then the capture stream, inside the pool).
"""

from __future__ import annotations

import pytest

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

H, S, B = 256, 128, 2
FLAGS = ("--layers", "2", "--te-cuda-graphs", "1")
HIDDEN = S * B * H * 2
MASK = B * S * S
LAYER_GRADS = 2 * (3 * H * H + 3 * H + H * H + H + 4 * H * H + 4 * H + 4 * H * H + H + 4 * H)
WORKSPACE = 32 * 1024 * 1024


@pytest.fixture(scope="module")
def graphed(tmp_path_factory):
    return M.trace(tmp_path_factory.mktemp("te_graphs"), 1, 0, *FLAGS)


def _phases(snap: dict) -> list[dict]:
    return [p for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]]


def _kept_by_capture(snap: dict) -> list[tuple[str, int]]:
    """(op, bytes) of what the capture phase made and left alive when it ended."""
    phases = _phases(snap)
    capture = next(i for i, p in enumerate(phases) if p["name"].startswith("cuda_graph_capture"))
    start, end = phases[capture]["start_seq"], phases[capture + 1]["start_seq"]
    return sorted((snap["ops"][r["op"]], r["requested_bytes"]) for r in M._rows(snap)
                  if start <= r["alloc_seq"] < end and not 0 <= r["free_seq"] < end)


def test_the_capture_is_a_phase_between_the_eager_and_the_graphed_step(graphed):
    assert [p["name"] for p in _phases(graphed)] == [
        "setup_model_and_optimizer", "forward_backward_iter_0", "optimizer_step_iter_0",
        "cuda_graph_capture_after_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1"]
    assert any(n.startswith("Transformer Engine is not installed here: --cuda-graph-impl "
                            "transformer_engine runs memlens' stand-in")
               for n in graphed["meta"]["notes"])


def test_the_capture_keeps_what_te_keeps(graphed):
    kept = _kept_by_capture(graphed)
    assert sum(b for _, b in kept) == (2 * (HIDDEN + MASK) + HIDDEN + HIDDEN + LAYER_GRADS
                                       + 4 * WORKSPACE)  # 136,387,072
    assert [b for op, b in kept if op == "cublas_workspace"] == [WORKSPACE] * 4


def test_one_pool_holds_both_layers_graphs_and_the_next_step_replays_them(graphed):
    """Two layers, one micro-batch (no pipeline: Megatron captures one): a forward and a
    backward graph each, in TE's one pool, named; the graphed step replays all four and runs
    none of the layers' ops."""
    pools = graphed["summary"]["devices"][graphed["meta"]["device_key"]]["graph_pools"]
    assert len(pools) == 1
    assert pools[0]["name"].startswith("Transformer Engine make_graphed_callables")
    assert len(pools[0]["graphs"]) == 4 and pools[0]["replays"] == 4
    assert pools[0]["reserved_peak_bytes"] >= 2 * WORKSPACE  # the capture stream's two
    phases = _phases(graphed)
    step = next(p for p in phases if p["name"] == "forward_backward_iter_1")
    layers = {i for i, m in enumerate(graphed["modules"]) if ".decoder.layers." in m["fqn"]}
    assert layers
    in_step = [r for r in M._rows(graphed)
               if step["start_seq"] <= r["alloc_seq"] < step["end_seq"]]
    assert in_step and not [r for r in in_step if r["module"] in layers]


def test_a_pipeline_shares_static_inputs_between_micro_batches_that_do_not_overlap(tmp_path):
    """PP 2, 4 micro-batches, stage 0 (one layer): 1F1B holds 2 micro-batches at once there,
    so TE's capture (Megatron's `_order`) keeps 2 sets of sample inputs, not 4; the other
    tensors are the one layer's as above."""
    snap = M.trace(tmp_path, 2, 0, *FLAGS, "--pp", "2", "--microbatches", "4")
    kept = _kept_by_capture(snap)
    assert [b for op, b in kept if op == "ones"] == [HIDDEN] * 2  # Megatron's sample hidden
    assert sum(b for _, b in kept) == (2 * (HIDDEN + MASK) + HIDDEN + HIDDEN + LAYER_GRADS
                                       + 4 * WORKSPACE)
