"""What is held for backward is an activation, whichever mechanism holds it; what a script
allocates outside every module belongs to the script's line and to no module.

scripts/sdpa_block.py: one attention block in bf16, batch 2, 4 heads, 100 tokens, head size
64, flash attention (an A100 target). Under selective activation checkpointing with a policy
that saves aten._scaled_dot_product_flash_attention, the kernel's outputs stay alive until
backward in checkpointing's own cache, not through autograd's saved-tensor hooks."""

import pytest

from support.paths import TESTS
from support.trace_cache import traced

SCRIPT = TESTS / "scripts" / "sdpa_block.py"
LOSS_LINE = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1)
                 if "loss = model(x)" in text)
FLASH = "_scaled_dot_product_flash_attention"
ACTIVATION, TEMPORARY = 4, 5
# The flash kernel's outputs: out b*s*h*d bf16 = 2*100*4*64*2, fp32 logsumexp b*h*s*4 =
# 2*4*100*4, the Philox state (16 B seed pair, 8 B offset), an empty debug mask.
FLASH_OUTPUTS = [102_400, 3_200, 16, 8, 0]
FLASH_BLOCKS = 102_400 + 3_584 + 512 + 512  # each rounded up to 512 B by the allocator


def trace(memlens, tmp_path, *args):
    """The block traced with ARGS, once per session (support/trace_cache.py)."""
    run = traced("run", "--device", "a100-80gb", "--iterations", "1", "--", str(SCRIPT), *args)
    assert run.out.returncode == 0, run.out.stderr[-3000:]
    return run.snapshot()


def rows(snap, op=None, backward=None):
    a = snap["allocations"]
    for i in range(len(a["bytes"])):
        if (op is None or snap["ops"][a["op"][i]] == op) and (
                backward is None or a["backward"][i] == backward):
            yield {k: a[k][i] for k in ("requested_bytes", "bytes", "category", "module",
                                        "stack", "backward")}


def activations_when_backward_begins(snap):
    a = snap["allocations"]
    start = min(a["alloc_seq"][i] for i in range(len(a["bytes"])) if a["backward"][i])
    return sum(a["bytes"][i] for i in range(len(a["bytes"]))
               if a["category"][i] == ACTIVATION and a["alloc_seq"][i] < start
               and not 0 <= a["free_seq"][i] < start)


def innermost_line(snap, stack):
    frames = snap["stacks"][stack]
    return snap["frames"][frames[0]]["line"] if frames else None  # innermost first


def test_selective_checkpointing_keeps_the_saved_kernels_outputs_as_activations(memlens, tmp_path):
    snap = trace(memlens, tmp_path, "--sac", "save-flash")
    first = list(rows(snap, FLASH, backward=0))[:5]  # forward; the recomputation reads the cache
    assert [r["requested_bytes"] for r in first] == FLASH_OUTPUTS
    assert {r["category"] for r in first} == {ACTIVATION}
    assert len(list(rows(snap, FLASH))) == 5  # backward replayed them, it did not rerun flash


def test_recomputing_everything_keeps_no_activation_of_the_block(memlens, tmp_path):
    saved = trace(memlens, tmp_path, "--sac", "save-flash")
    recomputed = trace(memlens, tmp_path, "--sac", "recompute-all")
    again = list(rows(recomputed, FLASH))
    assert len(again) == 10  # forward, and the recomputation in backward
    assert {r["category"] for r in again[:5]} == {TEMPORARY}
    # When backward begins both hold the loss line's fp32 copy of the output (2*100*256*4 =
    # 204,800 B); saving flash holds exactly its outputs besides.
    held = [activations_when_backward_begins(s) for s in (saved, recomputed)]
    assert held == [204_800 + FLASH_BLOCKS, 204_800]


def test_the_loss_made_at_the_training_loop_belongs_to_its_line_and_no_module(memlens, tmp_path):
    for sac in ("none", "save-flash"):
        snap = trace(memlens, tmp_path, "--sac", sac)
        at_loss = [r for r in rows(snap, backward=0) if innermost_line(snap, r["stack"]) == LOSS_LINE]
        # .float() (2*100*256*4 B), pow (the same), mean (4 B), in the one iteration
        assert sorted(r["requested_bytes"] for r in at_loss) == [4, 204_800, 204_800]
        assert {r["module"] for r in at_loss} == {-1}
        # The loss's own backward (mean, pow, the cast) runs before any module's backward.
        loss_backward = [r for r in rows(snap, backward=1)][:3]
        assert {r["module"] for r in loss_backward} == {-1}


def test_plain_checkpointing_keeps_what_the_recomputation_saves_as_activations(memlens, tmp_path):
    snap = trace(memlens, tmp_path, "--sac", "plain")
    forward = list(rows(snap, FLASH, backward=0))
    recomputed = list(rows(snap, FLASH, backward=1))
    # Forward keeps nothing of the region (its outputs are freed there); backward recomputes it
    # and holds the kernel's outputs until flash's backward used them (the empty debug mask is
    # not saved).
    assert [(r["requested_bytes"], r["category"]) for r in forward] == [
        (n, TEMPORARY) for n in FLASH_OUTPUTS]
    assert [(r["requested_bytes"], r["category"]) for r in recomputed] == [
        (n, ACTIVATION) for n in FLASH_OUTPUTS[:4]] + [(0, TEMPORARY)]
    # and the projections' outputs flash reads: q (b*s*h*d*2) and the fused k, v (twice that)
    mm = [(r["requested_bytes"], r["category"]) for r in rows(snap, "mm", backward=1)][:2]
    assert mm == [(102_400, ACTIVATION), (204_800, ACTIVATION)]


@pytest.mark.slow  # a trace in a fresh process
def test_a_custom_functions_backward_gets_the_saved_parameter_itself(tmp_path):
    """scripts/gathered_weight_function.py: a custom Function saves a parameter whose buffer
    and Python attribute change between forward and backward (ZeRO-3's gather and release,
    TRL's chunked log-prob reading `ds_status`). With memlens' saved-tensor hooks autograd
    would hand backward a new alias without the attribute; the script raises if it does. Its
    gradient is the 1024 x 1024 fp32 weight's, 4 MiB."""
    import json

    from support.runs import run_memlens

    out = run_memlens("run", "--json", "--no-snapshot", "--progress", "none", "--",
                      str(TESTS / "scripts" / "gathered_weight_function.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["category_peaks"]["gradient"] == 1024 * 1024 * 4
