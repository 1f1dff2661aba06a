"""torch.compile as training scripts use it on a CUDA target (h100-80gb), where the trace must
compile what a GPU run compiles: per-block compiled blocks share their graphs (torchtitan's
--training.compile: fullgraph=True over more blocks than Dynamo's recompile limit of 8), and
SDPA called with keyword arguments compiles inside a module and inside checkpointed blocks
under dynamic shapes (nanoGPT's attention)."""

import json

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts" / "compile_seams"


def traced(script: str, *args: str) -> dict:
    out = run_memlens("run", "--json", "--no-snapshot", "--device", "h100-80gb", "--",
                      str(SCRIPTS / script), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def per_block():
    return traced("per_block_fullgraph.py", "--layers", "12")


@pytest.fixture(scope="module")
def attention():
    return traced("compiled_gpt_attention.py")


@pytest.fixture(scope="module")
def checkpointed_attention():
    return traced("compiled_gpt_attention.py", "--checkpoint")


def test_identical_blocks_compiled_per_block_share_their_graphs(per_block):
    """12 blocks, each `torch.compile(block, fullgraph=True)`: two graphs, as on a GPU, where
    Dynamo's guards see the block's type and its input's metadata, not which block it is. The
    first block's input needs no gradient and the others' do (a guard on requires_grad): one
    graph for block 0, one for blocks 1-11. (Before, each block recompiled: a new memlens
    backend per torch.compile call failed Dynamo's backend match, and the module tracker's
    hook, traced into each block, guarded on its stack of open modules; the ninth block hit
    the recompile limit and fullgraph=True made that an error.)"""
    region, = per_block["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 2, 0)
    assert not [n for n in per_block["notes"] if "traced eagerly" in n]
    # Per block, bf16: LayerNorm 2 x 128 (256 B each, booked as the allocator's 512 B blocks),
    # qkv 128 x 384, proj 128 x 128, fc1 128 x 512, fc2 512 x 128 = 196,608 weights x 2 B.
    per_block_bytes = 2 * 512 + 2 * (128 * 384 + 128 * 128 + 128 * 512 + 512 * 128)
    assert per_block["categories_at_peak"]["parameter"] == 12 * per_block_bytes == 4_730_880


def test_sdpa_with_keyword_arguments_in_a_dynamic_compiled_module(attention):
    """`F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.1, is_causal=True)`
    compiled with dynamic=True: dropout 0.1 is not a multiple of 1/16, so cuDNN (first on sm90)
    cannot take it and flash does, as in an eager run. Flash's backward keeps q, k, v (views of
    c_attn's output, 2 x 128 x 768 bf16 = 384 KiB), the output (2 x 4 heads x 128 x 64 bf16 =
    128 KiB), its logsumexp (2 x 4 x 128 fp32 = 4 KiB) and its Philox state (a 2-element uint64
    rng_state and the 0-d uint64 `unused`: 24 B)."""
    region, = attention["compiled_regions"]
    assert (region["compiled_as"], region["graphs"], region["graph_breaks"]) == ("inductor", 1, 0)
    assert region["saved_bytes"] == \
        2 * 128 * 768 * 2 + 2 * 4 * 128 * 64 * 2 + 2 * 4 * 128 * 4 + 24 == 528_408
    note, = [n for n in attention["notes"] if n.startswith("attention (SDPA)")]
    assert note.startswith("attention (SDPA) ran on flash (")


def test_sdpa_in_compiled_checkpointed_blocks(checkpointed_attention):
    """Two of those blocks, each under torch.utils.checkpoint, in one compiled model (dynamic
    shapes): the partitioner recomputes each block in backward and keeps the second block's input
    (the first block's c_proj output, 2 x 128 x 256 bf16 = 128 KiB; the first block's input is
    the region's own) and, for each block, the CUDA RNG state its dropout replays (seed and
    offset, 16 B)."""
    region, = checkpointed_attention["compiled_regions"]
    assert (region["compiled_as"], region["graph_breaks"]) == ("inductor", 0)
    assert region["saved_bytes"] == 2 * 128 * 256 * 2 + 2 * 16 == 131_104
    assert not [n for n in checkpointed_attention["notes"] if "traced eagerly" in n]
