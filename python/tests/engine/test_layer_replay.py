"""Layer replay (engine/layer_replay.py): a trace that replays identical blocks writes the
snapshot a full trace (`--no-layer-replay`) writes, field by field; where the blocks are not
provably one program it traces them in full and says why in `meta.layer_replay`; where a replay
is found wrong, or the script fails after one, the whole trace runs again in full and says so.

The pairs of traces and their comparison are support/snapshot_pairs.py's.
"""

import bisect

import pytest

from support.paths import TESTS
from support.snapshot_pairs import differences, pair

pytestmark = pytest.mark.slow  # traces in fresh processes

GPT = TESTS / "scripts" / "layer_replay_gpt.py"
LLAMA = TESTS / "scripts" / "hf" / "llama_loop.py"


# (name, script arguments, forward replays, backward replays). 8 blocks. The first pass traces
# 0, 1, 6 and 7 and replays 2..5 (4); a pass whose recording has matched a traced block once
# traces 0, 6 and 7 (5), comparing 0 and 7 too; once twice, forward and backward, none where
# 0 and 7 matched (8: layer_groups.Pass). The trace stops after its 2 iterations.
REPLAYED = [
    # 2 steps of one forward and backward each: 4 + 5, forward and backward.
    ("plain", (), 9, 9),
    # 2 steps of 2 micro-batches (the second adds to the gradients the first made, a backward
    # of its own: recorded as in a first pass), and an evaluation forward under no_grad after
    # step 1, called from another line (a program of its own, layer_groups.Program): step 1
    # 4 + 4, the evaluation 4, step 2 5 + 5 (22; the evaluation after step 2 is not reached);
    # backward 4 + 4 + 5 + 5.
    ("accumulate-evaluate", ("--accumulate", "2", "--evaluate"), 22, 18),
    # 2 steps of 4 micro-batches. Step 1: 4 (a first pass), 4 (the first to add to gradients),
    # 5 (its recording matched once), 8; step 2: 5 (the first micro-batch's backward matched
    # once), 8, 8, 8.
    ("accumulate-4", ("--accumulate", "4"), 50, 50),
    # The same, the last micro-batch of each step under sdpa_kernel(MATH), from the same line:
    # another attention kernel, another program (math attention keeps its scores), recorded
    # anew, and the next pass's flash attention recorded anew after it: step 1 4, 4, 5, 4;
    # step 2 4, 4, 5, 4.
    ("math-attention", ("--accumulate", "4", "--math-attention", "4"), 34, 34),
    # The same with dropout after each block's MLP, set to 0 on every block for step 2 (no
    # more masks): the blocks' settings changed since the recording, recorded anew: step 1 4,
    # 4, 5, 8; step 2 4, 4, 5, 8.
    ("dropout-off", ("--accumulate", "4", "--dropout-off", "1"), 42, 42),
    # 2 steps, each block's backward taking a smaller workspace in step 2 (its forward the
    # same): step 2's block 6 records its backward anew, blocks 5..1 replay it, and block 0's
    # traced backward, like it, confirms them (no full trace again): 4 + 5, as "plain".
    ("backward-changes", ("--workspace-from", "1"), 9, 9),
    # A host constant wrapped and viewed in each block (Megatron's fused softmax passes its
    # scale as `torch.tensor([scale])[0]`): no value computed on the host, replayed as "plain".
    ("host-constant", ("--host-scale",), 9, 9),
]
@pytest.mark.parametrize("name,args,forward,backward", REPLAYED, ids=[r[0] for r in REPLAYED])
def test_a_replayed_trace_writes_the_full_traces_snapshot(tmp_path, name, args, forward,
                                                          backward):
    replayed, full = pair(tmp_path, name, GPT, *args)
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "h", "blocks": 8}],
        "replayed_forward": forward, "replayed_backward": backward}
    assert full["meta"]["layer_replay"] == {"enabled": False}


def frees_by_burst(snapshot: dict) -> dict:
    """The snapshot with each free numbered by the allocations before it, and no timeline:
    autocast's cache lets its weight casts go in the order of a C++ hash map of tensor
    addresses, which differs between two full traces as well (as does the timeline inside that
    run of frees); what is freed between two allocations does not."""
    allocs = sorted(snapshot["allocations"]["alloc_seq"])
    snapshot["allocations"]["free_seq"] = [
        f if f < 0 else bisect.bisect_left(allocs, f) for f in snapshot["allocations"]["free_seq"]]
    del snapshot["timeline"]
    return snapshot


def test_autocast_blocks_replay_with_their_cached_weight_casts(tmp_path):
    """fp32 weights under bf16 autocast: each block's weight casts stay in autocast's cache
    (the weights' also saved for backward, the biases' only there) until autocast exits. 2 steps
    and an evaluation forward after the first: 4 + 4 + 5 forward replays, 4 + 5 backward."""
    replayed, full = pair(tmp_path, "autocast", GPT, "--autocast", "--evaluate")
    assert differences(frees_by_burst(replayed), frees_by_burst(full)) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "h", "blocks": 8}],
        "replayed_forward": 13, "replayed_backward": 9}


def test_a_hugging_face_llama_without_its_cache_replays_its_decoder_layers(tmp_path):
    # 6 layers, 2 steps: layers 2 and 3 replayed in the first, 1 to 3 in the second (its
    # position ids a new tensor of the same values), forward and backward.
    replayed, full = pair(tmp_path, "llama", LLAMA)
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "model.layers", "blocks": 6}],
        "replayed_forward": 5, "replayed_backward": 5}


TRACED_IN_FULL = [
    # Every third block scales its input: the forward reads the attribute that numbers them.
    ("branch", ("--branch-every", "3"), "its forward reads `Block.index`, which differs between "
     "the blocks"),
    # Checkpointing's saved-tensor hooks keep the block's inputs, not autograd's.
    ("checkpoint", ("--checkpoint",), "it runs under another library's saved-tensor hooks "
     "(activation checkpointing, offloading)"),
]


@pytest.mark.parametrize("name,args,why", TRACED_IN_FULL, ids=[r[0] for r in TRACED_IN_FULL])
def test_blocks_that_are_not_provably_one_program_are_traced_in_full(tmp_path, name, args, why):
    replayed, full = pair(tmp_path, name, GPT, *args)
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "h", "blocks": 8, "traced_in_full": why}],
        "replayed_forward": 0, "replayed_backward": 0}


@pytest.mark.parametrize("args", [(), ("--keep-output",)], ids=["cache-dropped", "cache-kept"])
def test_a_llama_that_writes_its_cache_per_layer_replays_each_entry(tmp_path, args):
    """With the config's default `use_cache=True` the forward makes a cache, and each layer
    writes its own entry of it (a copy of its keys and values), found by its `layer_idx`
    handed to the cache's `update`. A replayed layer writes its entry as the recorded one did:
    freed with the cache where autograd no longer holds them (the output kept until the next
    forward, `cache-kept`), in the backward where the cache went first (`cache-dropped`).
    Layers 2 and 3 replayed in the first step, 1 to 3 in the second."""
    replayed, full = pair(tmp_path, "llama-cache", LLAMA, "--use-cache", *args)
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "model.layers", "blocks": 6}],
        "replayed_forward": 5, "replayed_backward": 5}


def test_generate_replays_its_prefill_and_each_decode_step(tmp_path):
    """`generate` before each training step: a prefill, then decode steps that each
    concatenate a layer's new keys and values onto its cache entry (the entry's old tensors
    freed by the layer, by place). 4 forwards of generate and 1 of training per step, 2 layers
    replayed in each of step 1's; in step 2's the prefill and the training forward replay 3
    (their recordings matched a traced layer once), the decode steps 2 (each entry longer than
    the step before's): 22 forward replays, 2 + 3 backward."""
    replayed, full = pair(tmp_path, "llama-generate", LLAMA, "--use-cache", "--generate", "4")
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "model.layers", "blocks": 6}],
        "replayed_forward": 22, "replayed_backward": 5}


def test_a_layer_index_used_for_more_than_the_cache_traces_the_layers_in_full(tmp_path):
    """Each layer also scales its output by its depth, read from its `layer_idx`: not provably
    its siblings' program."""
    replayed, full = pair(tmp_path, "llama-depth", LLAMA, "--use-cache", "--scale-by-depth")
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"]["groups"] == [{
        "module": "model.layers", "blocks": 6,
        "traced_in_full": "its forward reads `LlamaAttention.layer_idx`, which differs between "
                          "the blocks"}]


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_the_corpus_llama_with_gradient_checkpointing_replays_its_layers(tmp_path, reentrant):
    """The corpus' Llama (`gradient_checkpointing_enable()`: each decoder layer checkpoints
    itself, keeping the RNG states on its own), with 6 layers instead of 2. Transformers'
    default, non-reentrant checkpoint lets the RNG states go with the layer's backward, which
    recomputes the layer (its attention calls counted too): layers 2 and 3 replayed. The
    reentrant checkpoint keeps them on its node until the graph is let go: traced in full."""
    source = (TESTS / "scripts" / "corpus" / "hf_llama_bf16.py").read_text()
    assert source.count("num_hidden_layers=2") == 1
    call = "    model.gradient_checkpointing_enable()\n"
    assert source.count(call) == 1
    if reentrant:
        source = source.replace(call, "    model.gradient_checkpointing_enable("
                                      "gradient_checkpointing_kwargs={'use_reentrant': True})\n")
    script = tmp_path / "hf_llama_6_layers.py"
    script.write_text(source.replace("num_hidden_layers=2", "num_hidden_layers=6"))
    replayed, full = pair(tmp_path, "corpus-llama", script)
    assert differences(replayed, full) == []
    if reentrant:
        assert replayed["meta"]["layer_replay"]["groups"] == [{
            "module": "model.layers", "blocks": 6,
            "traced_in_full": "its forward makes RNG states that a reentrant checkpoint keeps"}]
    else:
        assert replayed["meta"]["layer_replay"] == {
            "enabled": True, "groups": [{"module": "model.layers", "blocks": 6}],
            "replayed_forward": 4, "replayed_backward": 4}


def test_the_corpus_mistral_replays_its_sliding_window_layers(tmp_path):
    """The corpus' Mistral (a sliding window, bf16 autocast, 2 micro-batches a step), with 6
    layers instead of 2. Each layer's cache entry keeps its window size as a one-element tensor
    moved to the device on first use, with its value: the replayed entry holds the same, until
    the cache goes (not with autocast's cached weight casts). The trace's 2 steps of 2
    micro-batches: layers 2 and 3 replayed in step 1's forwards and backwards (the second
    micro-batch's backward adds to gradients: recorded as in a first pass), 1 to 3 in step 2's
    (each recording matched a traced block once before)."""
    source = (TESTS / "scripts" / "corpus" / "hf_mistral_accum.py").read_text()
    assert source.count("num_hidden_layers=2") == 1
    script = tmp_path / "hf_mistral_6_layers.py"
    script.write_text(source.replace("num_hidden_layers=2", "num_hidden_layers=6"))
    replayed, full = pair(tmp_path, "corpus-mistral", script)
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "model.layers", "blocks": 6}],
        "replayed_forward": 10, "replayed_backward": 10}


ABANDONED = [
    # A forward whose graph is let go without a backward: autograd frees what the blocks saved
    # in its own order, which a replay cannot know.
    ("dropped-graph", ("--keep-graph",), "a replayed block's graph was let go before its backward"),
    # torch.autograd.grad of the parameters: a replayed block's parameters are not inputs of
    # its node, so autograd finds them unused and the script fails.
    ("grad-of-params", ("--grad-of-params",),
     "the script failed where blocks were replayed (ScriptError)"),
]


@pytest.mark.parametrize("name,args,why", ABANDONED, ids=[r[0] for r in ABANDONED])
def test_a_replay_found_wrong_is_traced_again_in_full(tmp_path, name, args, why):
    replayed, full = pair(tmp_path, name, GPT, *args)
    note = (f"Layer replay was abandoned ({why}); the script was traced again with every block "
            f"traced.")
    assert replayed["meta"]["notes"] == full["meta"]["notes"] + [note]
    replayed["meta"]["notes"] = full["meta"]["notes"]
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {"enabled": False, "abandoned": why}


def test_a_sequential_of_linears_replays_its_middle_layers(tmp_path):
    """Eight `nn.Linear(8192, 8192)` in an `nn.Sequential`, one backward: the last layer's
    backward takes the loss's expanded gradient and the backward thread's first cuBLAS
    workspace, so the recording is the next-to-last layer's. Layers 2..5 replayed."""
    script = TESTS / "scripts" / "values" / "cpu_built_model.py"
    replayed, full = pair(tmp_path, "linears", script)
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"] == {
        "enabled": True, "groups": [{"module": "", "blocks": 8}],
        "replayed_forward": 4, "replayed_backward": 4}


def test_per_block_compiled_blocks_are_not_replayed_and_trace_as_before(tmp_path):
    """torchtitan's per-block `torch.compile(fullgraph=True)`: the compiled program runs each
    block, so there is nothing to replay; the wrappers must not change what it compiles."""
    script = TESTS / "scripts" / "compile_seams" / "per_block_fullgraph.py"
    replayed, full = pair(tmp_path, "compiled", script, "--layers", "6")
    assert differences(replayed, full) == []
    assert replayed["meta"]["layer_replay"]["replayed_forward"] == 0
