"""torch.compile on a CUDA target (h100-80gb): Inductor's own GPU code (its Triton kernels fused
by its scheduler, never built; its wrapper's buffers booked), with Triton installed and no GPU.
What the compiled program saves for backward must be what Inductor's partitioner saves (the
partitioner run here, directly, on the joint graph of the same model), and what its wrapper
allocates, reuses and frees is derived by hand for the MLP. Without Triton a region is
AOTAutograd's partitioned graphs run op by op, and a note says so."""

import json
import os
import sys

import pytest
import torch

from support.paths import TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

CASE = TESTS / "cases" / "compiled_case.py"
C_GRADIENT, C_ACTIVATION, C_TEMPORARY = 2, 4, 5  # snapshot category indices (memlens/categories.py)
sys.path.insert(0, str(CASE.parent))
import compiled_case  # noqa: E402  (its models; the training loop runs only as a script)


def notes_but_versions(data: dict) -> list[str]:
    """The trace's notes but one of a library outside TESTED_VERSIONS (make test-compat runs
    these tests on versions its table does not hold yet)."""
    return [n for n in data["notes"] if "outside the range memlens' integration" not in n]


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


def traced(memlens, model: str, how: str, *case_args: str, options=("--no-snapshot",),
           env: dict | None = None) -> dict:
    out = memlens("run", "--json", *options, "--", str(CASE), "--model", model,
                  "--device", "cuda", "--how", how, *case_args, env=env)
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
        ("inductor", 1, 0)
    assert region["saved_bytes"] == expected
    assert not notes_but_versions(data)


def forward_and_backward_buffers(snapshot: dict) -> tuple[list, list]:
    """(op, requested bytes) of what the model's modules allocated on cuda:0 in a one-step
    trace, in order: activations and temporaries, and the gradients backward makes (not the
    parameters, the optimizer's state, nor the loss's tensors, which no module makes), the
    forward's and the backward's apart."""
    a, ops = snapshot["allocations"], snapshot["ops"]
    rows = sorted((a["alloc_seq"][i], ops[a["op"][i]], a["requested_bytes"][i], a["backward"][i])
                  for i in range(len(a["bytes"]))
                  if a["devices"][a["device"][i]] == "cuda:0" and a["module"][i] >= 0
                  and a["category"][i] in (C_GRADIENT, C_ACTIVATION, C_TEMPORARY))
    return ([(op, n) for _, op, n, bw in rows if not bw],
            [(op, n) for _, op, n, bw in rows if bw])


def test_mlp_books_the_buffers_of_inductors_wrapper(memlens, tmp_path):
    """MLP(64 -> 256 -> 256 -> 10), a batch of 16, fp32, one step. Forward: each Linear is an
    extern addmm into a wrapper buffer and each GELU one Triton kernel into its own: 4 buffers of
    16 x 256 x 4 B = 16 KiB (all four saved for backward) and the 16 x 10 output, 640 B, as
    eager (GELU is one kernel there too). Backward: Inductor fuses each GELU's backward with the
    bias gradient's sum and writes the GELU gradient over the mm result it reads (`buf3 = buf0;
    del buf0  # reuse`), so it allocates, in order: head's grad input 16 x 256 (16 KiB), head.weight
    10 x 256 (10,240), head.bias 10 (40), fc2.bias 256 (1,024), fc2's grad input 16 x 256
    (16 KiB), fc2.weight 256 x 256 (256 KiB), fc1.bias (1,024), fc1.weight 256 x 64 (64 KiB) =
    372,776 B. Eager autograd allocates those and each gelu_backward's 16 KiB result besides."""
    bufs = {}
    for how in ("module", "eager"):
        snap = tmp_path / f"{how}.json"
        traced(memlens, "mlp", how, "--iterations", "1", options=("--snapshot", str(snap)))
        bufs[how] = forward_and_backward_buffers(json.loads(snap.read_text()))
    forward, backward = bufs["module"]
    assert forward == [("empty_strided", 16384)] * 4 + [("empty_strided", 640)]
    assert [n for _, n in bufs["eager"][0]] == [16384] * 4 + [640]
    assert backward == [("empty_strided", n) for n in
                        (16384, 10240, 40, 1024, 16384, 262144, 1024, 65536)]
    assert sum(n for _, n in backward) == 372_776
    eager_backward = bufs["eager"][1]
    assert [op for op, _ in eager_backward].count("gelu_backward") == 2
    assert sum(n for _, n in eager_backward) == 372_776 + 2 * 16384


# Peak of the second forward-backward on cuda:0, eager and compiled (h100-80gb, bytes; both
# include cuBLAS's 2 x 32 MiB workspaces). Compiled is lower where Inductor fuses what eager
# materialises: the Llama block's RMSNorms, rotary embedding and SiLU x up; the GPT block's
# attention scaling, mask and residuals; the convnet's BatchNorm + ReLU. The MLP's peak is its
# gradients (GELU is one kernel in eager too): the same. With activation checkpointing Inductor
# recomputes both blocks in one backward graph and holds a little more than eager's
# block-by-block recomputation (the CPU target, exact against real compiled runs, shows it too).
@pytest.mark.parametrize("name, lower", [("llama", True), ("gpt", True), ("convnet", True),
                                         ("mlp", False)])
def test_compiled_peak_is_below_eager_where_inductor_fuses(memlens, name, lower):
    eager = fwbw_peak(traced(memlens, name, "eager"))
    data = traced(memlens, name, "module")
    region, = data["compiled_regions"]
    assert region["compiled_as"] == "inductor"
    compiled = fwbw_peak(data)
    assert (compiled < eager) if lower else (compiled == eager)


def test_without_triton_a_region_is_the_partitioners_graphs_with_a_note(memlens, tmp_path):
    """A `triton` that cannot be imported (first on PYTHONPATH): the region still compiles, as
    AOTAutograd's partitioned graphs, and the note names what is missing."""
    hidden = tmp_path / "triton"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path),
                                                     os.environ.get("PYTHONPATH", "")) if p)}
    data = traced(memlens, "mlp", "module", env=env)
    region, = data["compiled_regions"]
    assert region["compiled_as"] == "partitioner"
    assert region["saved_bytes"] == 4 * 16 * 256 * 4
    note, = notes_but_versions(data)
    assert "fusion and buffer reuse are not" in note and "Triton is not installed" in note


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


def test_sdpa_with_none_arguments_compiles_fullgraph(memlens):
    """`scale=None` passed through to SDPA in a fullgraph region (Dynamo refused None as an
    argument of memlens' opaque SDPA: torchtitan's compiled blocks stopped there). cuDNN's
    backward keeps q, k, v (views of the qkv output, 2 x 128 x 768 bf16 = 384 KiB), the output
    (2 x 128 x 256 bf16 = 128 KiB), its statistics (2 x 4 heads x 128 fp32 = 4 KiB) and the
    dropout RNG's philox seed and offset (two int64 scalars)."""
    out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--",
                  str(TESTS / "scripts" / "compiled_sdpa_kwargs.py"))
    assert out.returncode == 0, out.stderr[-3000:]
    region, = json.loads(out.stdout)["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 1, 0)
    assert region["saved_bytes"] == 2 * 128 * 768 * 2 + 2 * 128 * 256 * 2 + 2 * 4 * 128 * 4 + 16


def test_flex_attention_with_an_integer_indexed_mask_is_inductors_template(memlens):
    """A mask that indexes a captured tensor with an integer (`order[0][q_idx]`, as context
    parallelism's load-balanced masks do) compiles: FlexAttention's tracing turns `[0]` into a
    0-dim index tensor made on the device, a constant the tracer does not compute there, and
    Inductor's flex template refused the copy left instead (the region ran eagerly and made
    its [2, 4, 256, 256] fp32 scores). Compiled, the template saves for backward its output
    (2 x 4 x 256 x 64 bf16) and the rows' logsumexp (2 x 4 x 256 fp32); q, k and v are the
    region's inputs."""
    out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--",
                  str(TESTS / "scripts" / "compiled_flex_mask_index.py"))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    region, = data["compiled_regions"]
    assert (region["compiled_as"], region["graph_breaks"]) == ("inductor", 0), region
    assert not [n for n in notes_but_versions(data) if "traced eagerly" in n]
    assert region["saved_bytes"] == 2 * 4 * 256 * 64 * 2 + 2 * 4 * 256 * 4


def test_a_compiled_hugging_face_llama_is_inductors_program(memlens):
    """A whole `LlamaForCausalLM` compiled: its DynamicCache starts as `torch.tensor([],
    device="cuda")`, a constant AOTAutograd's tracer used to compute for real on the device (and
    the graph then ran eagerly). Its parameters: embeddings and lm_head 2 x 1024 x 256, per
    layer q and o 2 x 256 x 256, k and v 2 x 256 x 128 (2 KV heads of 64), the MLP 3 x 256 x 688
    and two norms of 256, the final norm 256: 1,975,552 bf16 values, 2 B each. Inductor saves
    less for backward than eager autograd would and its peak is below the eager trace's."""
    script = str(TESTS / "scripts" / "hf" / "compiled_llama.py")

    def run(*args: str) -> dict:
        out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--", script,
                      *args)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)

    data, eager = run(), run("--eager")
    region, = data["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 1, 0)
    assert not [n for n in data["notes"] if "traced eagerly" in n]
    assert 0 < region["saved_bytes"] < region["eager_saved_bytes"]
    params = 2 * 1024 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256) + 256
    assert data["categories_at_peak"]["parameter"] == \
        eager["categories_at_peak"]["parameter"] == 2 * params == 3_951_104
    assert fwbw_peak(data) < fwbw_peak(eager)


def test_a_selectively_checkpointed_block_compiled_per_block_is_inductors_program(memlens):
    """Each block in `checkpoint_wrapper` with a policy that saves matmul outputs and recomputes
    the rest, compiled per block with fullgraph=True (torchtitan's order). Attention is recomputed
    in backward. torch 2.13's partitioner takes it for random (SDPA is tagged
    nondeterministic_seeded): its RNG state is saved and replayed (the CUDA graph-safe generators
    memlens cannot make used to send the graph to eager). torch 2.14's sees that its dropout_p
    is 0 (`is_nonzero_dropout_sdpa`) and saves no state. Saved per block (2 x 128 tokens,
    bf16): the matmul outputs backward needs, qkv (768 wide, 384 KiB), proj (256 wide, 128 KiB;
    x + proj is recomputed for fc1's backward) and fc1 (1024 wide, 512 KiB), not fc2's (the
    residual add needs none); and on 2.13 the 16 B CUDA RNG state (seed and offset, host)."""
    out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--",
                  str(TESTS / "scripts" / "compiled_sac_block.py"))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    region, = data["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 2, 0)
    from torch._functorch import partitioners

    tokens = 2 * 128
    rng_state = 0 if hasattr(partitioners, "is_nonzero_dropout_sdpa") else 16
    per_block = tokens * (768 + 256 + 1024) * 2 + rng_state
    assert region["saved_bytes"] == 2 * per_block == 2_097_152 + 2 * rng_state
    assert not [n for n in data["notes"] if "traced eagerly" in n]


def test_fsdp2_blocks_compiled_per_block_are_inductors_programs(memlens):
    """FSDP2 on 2 simulated ranks, each residual MLP block compiled (fullgraph=True) before
    `fully_shard`, as torchtitan orders them: every block's graph is Inductor's, and the 4
    identical blocks share 2 graphs as on a GPU (the first block's input needs no gradient, the
    others' do). Saved per graph (Inductor's partitioner, as run on the same block in this
    file's helper: 8 x 64 = 512 tokens, fp32): fc1's output and GELU's output, 512 x 1024 x 4 B
    = 2 MiB each (the block's input is not counted: it is the region's). Rank 0 holds half of
    the 4 x 2 x 256 x 1024 fp32 weights: 4 MiB, and AdamW's two moments of them: 8 MiB."""
    out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--world-size", "2",
                  "--", str(TESTS / "scripts" / "distributed" / "fsdp2_compiled.py"))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    region, = data["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 2, 0)
    assert region["saved_bytes"] == 2 * 2 * 512 * 1024 * 4 == 8_388_608
    assert not [n for n in data["notes"] if "traced eagerly" in n]
    weights = 4 * 2 * 256 * 1024 * 4
    states = data["categories_at_peak"]
    assert (states["parameter"], states["optimizer_state"]) == (weights // 2, weights)


def test_a_function_compiled_in_a_backward_sees_the_traces_inductor_settings(memlens, tmp_path):
    """Autograd runs a CUDA backward on its device thread, where Megatron-style fused activations
    compile their backward helper; torch 2.13's settings are per context, so that thread saw
    Inductor's defaults: a pool of compile workers started (seconds of CPU in every Megatron
    rank's trace), and the on-disk graph cache was read and written. Both helpers are Inductor
    programs; the backward thread sees one compile thread, no graph cache, and no pool exists."""
    seen = tmp_path / "seen.json"
    out = memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--",
                  str(TESTS / "scripts" / "compiled_in_backward.py"), str(seen))
    assert out.returncode == 0, out.stderr[-3000:]
    regions = json.loads(out.stdout)["compiled_regions"]
    assert sorted((r["call"], r["compiled_as"], r["graphs"]) for r in regions) == [
        ("torch.compile(bias_gelu)", "inductor", 1), ("torch.compile(bias_gelu_back)", "inductor", 1)]
    assert json.loads(seen.read_text()) == {"other_thread": True, "compile_threads": 1,
                                            "fx_graph_cache": False, "pools": 0}
