"""torch.compile(mode="reduce-overhead") traced: scripts/cuda_graphs/reduce_overhead.py on the
H100 target, traced once. Inductor runs the compiled forward and backward through its CUDA
graph trees (torch 2.13, _inductor/cudagraph_trees.py): step 0 warms both up with their
allocations in the tree's private pool, step 1 records them into it, steps 2 and 3 replay;
then three calls under no_grad warm up, record and replay the inference graph. The script
calls cudagraph_mark_step_begin before each, as the trees' documentation advises.
Sizes (fp32): the (512, 1024) input and activations are 2 MiB, each 1024 x 1024 weight and its
gradient 4 MiB, a cuBLAS workspace on Hopper 32 MiB. The allocator: a request below 10 MiB on a
miss takes a 20 MiB segment, 32 MiB is its own segment, a scalar takes a 2 MiB small segment."""

import pytest

from support.paths import TESTS
from support.runs import marked_run_on_h100

MiB = 1 << 20
SCRIPT = TESTS / "scripts" / "cuda_graphs" / "reduce_overhead.py"
TREES = "Inductor CUDA graph trees (cuda:0)"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    marks, snap, output = marked_run_on_h100(tmp_path_factory.mktemp("graph_trees"), SCRIPT, 10)
    return [(allocated, reserved) for _, allocated, reserved in marks], snap, output


def pool_of(snap: dict) -> dict:
    [pool] = snap["summary"]["devices"]["cuda:0"]["graph_pools"]
    return pool


def test_the_region_is_inductors_program_run_through_the_trees(traced):
    """nn.Sequential compiles as it does on a GPU (torch.compile(module) goes through an
    inlined call, as OptimizedModule does: Dynamo skips torch.nn's own frames): two graphs,
    training and, under no_grad, inference (Dynamo guards on the grad mode). Its mode's CUDA
    graphs are modelled, so no note says the mode was dropped."""
    _, snap, output = traced
    [region] = snap["meta"]["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region.get("cuda_graphs")) == \
        ("inductor", 2, True)
    assert not [n for n in snap["meta"].get("notes", []) if "reduce-overhead" in n]
    assert "Accessing the data pointer of FakeTensor" not in output


def test_the_trees_pool_holds_one_workspace_and_one_segment(traced):
    """The tree's pool: one 32 MiB cuBLAS workspace segment (Inductor clears the workspaces
    around each warm-up and recording, so the forward's and the backward's handles take theirs
    in turn from the same free block) and one 20 MiB segment for the graphs' buffers (the
    forward's 3 x 2 MiB, the backward's two 4 MiB gradients and its 2 MiB temporaries, and the
    recording's copies of the non-static inputs: x, and the gradient of the output; the
    inference graph's output and buffer fit in it too). Four graphs were captured into it (the
    tree's empty keep-alive graph, the forward, the backward, the inference graph); steps 2
    and 3 replayed forward and backward, the third evaluation the inference graph: 5 replays."""
    _, snap, output = traced
    pool = pool_of(snap)
    assert pool["name"] == TREES
    assert pool["reserved_peak_bytes"] == 32 * MiB + 20 * MiB
    assert (len(pool["graphs"]), pool["replays"]) == (4, 5)
    assert TREES in output and ":24, backward, " in output and "(4 graphs)" in output


def test_every_step_ends_with_the_same_memory(traced):
    """After each optimizer step: the two weights (8 MiB), their gradients (8 MiB; the
    backward's outputs, in the pool), the batch (2 MiB) and the loss (a 4-byte scalar: a
    512-byte block) are allocated; reserved is the
    pool's 52 MiB, the default pool's 20 MiB segment (weights, batch, the loss's
    temporaries) and a 2 MiB small segment (the loss). A replay books the graphs' outputs again
    where the script let the previous ones go, in the blocks the recording used: nothing grows
    after the recording."""
    marks, _, _ = traced
    assert marks[:4] == [(18 * MiB + 512, 74 * MiB)] * 4
    # after the evaluation: its last output (2 MiB) besides; nothing more reserved
    assert marks[4] == (20 * MiB + 512, 74 * MiB)


def test_a_replay_books_only_the_graphs_outputs_in_the_pool(traced):
    """Steps 2 and 3 run no graph code: on the tree's stream they book the forward's three
    2 MiB outputs (the output and the two activations saved for backward) and the backward's
    two 4 MiB weight gradients, no buffer of the graphs and no cuBLAS workspace; the recording
    (step 1) booked the graphs' buffers and a workspace."""
    _, snap, _ = traced
    a, ops = snap["allocations"], snap["ops"]
    phases = snap["phases"]

    def on_tree_stream(phase_name):
        [index] = [i for i, p in enumerate(phases) if p["name"] == phase_name
                   and p["device"] == "cuda:0"]
        seqs = range(phases[index]["start_seq"], phases[index]["end_seq"])
        return sorted((ops[a["op"][i]], a["bytes"][i]) for i in range(len(a["bytes"]))
                      if a["alloc_seq"][i] in seqs and a["stream"][i] != 0
                      and a["bytes"][i] > 0)

    for step in (2, 3):
        assert on_tree_stream(f"forward_backward_iter_{step}") == \
            [("empty", 2 * MiB)] * 3 + [("empty", 4 * MiB)] * 2
    recorded = on_tree_stream("forward_backward_iter_1")
    assert ("cublas_workspace", 32 * MiB) in recorded
    assert [n for op, n in recorded if op == "empty_strided"]  # the graphs' own buffers


def test_an_option_that_turns_the_graphs_off_wins_over_the_mode(tmp_path):
    """mode="max-autotune" asks for CUDA graphs; options={"triton.cudagraphs": False} takes
    them back, as Inductor applies the options over the mode: no pool, no `cuda_graphs`, and
    the note is about the autotuning only."""
    _, snap, _ = marked_run_on_h100(tmp_path, SCRIPT.parent / "autotune_without_graphs.py", 10)
    [region] = snap["meta"]["compiled_regions"]
    assert (region["compiled_as"], "cuda_graphs" in region) == ("inductor", False)
    assert "graph_pools" not in snap["summary"]["devices"]["cuda:0"]
    # (A torch outside the tested range adds its own note: only the compile's are counted.)
    [note] = [n for n in snap["meta"]["notes"] if "tested on" not in n]
    assert "default kernel choices" in note and "CUDA graphs" not in note
