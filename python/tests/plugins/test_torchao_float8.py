"""torchao's float8 training on a simulated H100: what CUDA allocates, byte for byte, derived
by hand from torchao 0.18's call sequence (float8_linear.py, float8_scaling_utils.py,
float8_ops.py) run eagerly; 0.17's is the same.

The MLP (scripts/fp8/mlp_float8.py): two bias-free Linear 4096 x 4096 in bf16, 8192 tokens,
`model(x).sum().backward()`, SGD. Units: T = 8192 x 4096 elements (one activation), W = 4096 x
4096 (one weight); bf16 T = 64 MiB, fp32 T = 128 MiB, fp8 T = 32 MiB, bf16 W = 32 MiB, fp8 W =
16 MiB. A scalar takes one 512 B block.

torchao saves the high-precision input and weight for backward and casts again there
(force_recompute_fp8_weight_in_bwd is deprecated and changes nothing); each cast of a tensor
to FP8 runs amax -> scale, then x.to(fp32) * scale, clamp, .to(fp8): two fp32 copies alive
while the fp8 copy is made.
"""

import json

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

pytest.importorskip("torchao", minversion="0.17.0")

MLP = str(TESTS / "scripts" / "fp8" / "mlp_float8.py")
FSDP = str(TESTS / "scripts" / "fp8" / "fsdp2_float8.py")
MiB = 2**20
T_BF16, T_FP32, T_FP8 = 64 * MiB, 128 * MiB, 32 * MiB
W_BF16, W_FP8 = 32 * MiB, 16 * MiB
BLOCK = 512
WORKSPACES = 2 * 32 * MiB  # cuBLAS on Hopper: 32 MiB per handle, forward and backward threads


def trace(tmp_path, script, *args, device="h100-80gb", world_size=None, env=None) -> dict:
    path = tmp_path / "snapshot.json"
    extra = ["--world-size", str(world_size)] if world_size else []
    out = run_memlens("run", "--device", device, *extra, "--snapshot", str(path), "--", script,
                      *args, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(path.read_text())


def allocations_in(snap: dict, phase: str, key: str = "bytes") -> list[tuple[str, int, int]]:
    """(op, `key`, category index) of each GPU allocation made in `phase`, in order."""
    a, ops = snap["allocations"], snap["ops"]
    gpu = a["devices"].index("cuda:0")
    p = next(p for p in snap["phases"] if p["name"] == phase and p["device"] == "cuda:0")
    return [(ops[a["op"][i]], a[key][i], a["category"][i])
            for i in sorted(range(len(a["bytes"])), key=lambda i: a["alloc_seq"][i])
            if a["device"][i] == gpu and p["start_seq"] <= a["alloc_seq"][i] < p["end_seq"]]


def fp8_peak(snap: dict, key: str = "bytes") -> tuple[int, str]:
    """The most bytes (`key` of each allocation) the fp8 subcategory held at once on the GPU,
    and the phase in which it first held them."""
    a = snap["allocations"]
    gpu = a["devices"].index("cuda:0")
    events = []
    for i, sub in enumerate(a["subcategory"]):
        if sub == 0 and a["device"][i] == gpu:
            events.append((a["alloc_seq"][i], a[key][i]))
            if a["free_seq"][i] >= 0:
                events.append((a["free_seq"][i], -a[key][i]))
    current, peak, peak_seq = 0, 0, -1
    for seq, delta in sorted(events):
        current += delta
        if current > peak:
            peak, peak_seq = current, seq
    return peak, next(p["name"] for p in snap["phases"] if p["device"] == "cuda:0"
                      and p["start_seq"] <= peak_seq < p["end_seq"])


def fp8(snap: dict) -> dict:
    (sub,) = snap["summary"]["subcategories"]
    assert (sub["name"], sub["label"], sub["category"]) == ("fp8", "fp8 weights/scales",
                                                            "parameter")
    return sub


# The peak, both recipes: layer 0's backward, casting its input x for the weight gradient.
# Alive: both weights (2 W bf16), both cuBLAS workspaces, x (T bf16), layer 1's weight
# gradient (W bf16), the loss and its seed gradient (2 blocks), the gradient layer 1 passed
# down and layer 0's own grad_input (2 T bf16: torchao computes it although x needs none),
# layer 0's recast weight (W fp8 + its scale), the two casts of the incoming gradient (for
# grad_input and for grad_weight: 2 T fp8 + scales), x's scale, and x's cast in flight: two
# T fp32 (x.to(fp32) * scale, clamp) and the T fp8 being made.
COMMON_AT_PEAK = (2 * W_BF16 + WORKSPACES + T_BF16 + W_BF16 + 2 * BLOCK + 2 * T_BF16 + W_FP8
                  + 2 * T_FP8 + 2 * T_FP32 + T_FP8)


@pytest.mark.parametrize("recipe,scales_at_peak,weight_scale", [
    # tensorwise: every scale is one fp32 scalar: weight, 2 gradient casts, x = 4 blocks
    ("tensorwise", 4 * BLOCK, BLOCK),
    # rowwise: the weight's scale is per row (4096 x 1 fp32 = 16 KiB), the gradient cast for
    # grad_input per token (8192 x 1 = 32 KiB), the casts for grad_weight per column of the
    # (tokens, features) matrix (1 x 4096 = 16 KiB: gradient and x)
    ("rowwise", 16384 + 32768 + 16384 + 16384, 16384),
])
def test_mlp_float8_recipe_allocates_what_cuda_allocates(tmp_path, recipe, scales_at_peak,
                                                         weight_scale):
    snap = trace(tmp_path, MLP, recipe)
    summary = snap["summary"]
    assert summary["peak_bytes"] == COMMON_AT_PEAK + scales_at_peak
    # SGD keeps no state and zero_grad frees the gradients: both steps peak alike, the first
    # one reaches it first
    assert summary["peak_phase"] == "forward_backward_iter_0"
    # FP8 weights/scales: one layer's FP8 weight and its scale at a time (the forward casts
    # are freed after each GEMM, the backward recasts too), and one of them is live at the peak
    sub = fp8(snap)
    assert sub["peak_bytes"] == sub["at_peak_bytes"] == W_FP8 + weight_scale
    # Saved for backward: layer 0's bf16 output (layer 1's input); x is the input category.
    # Nothing FP8 is saved.
    assert summary["category_peaks"]["activation"] == T_BF16
    # _scaled_mm outputs of the second step: forward 2 x (T bf16), then per layer backward
    # grad_input (T bf16) and grad_weight (W bf16), layer 1 first.
    scaled_mm = [b for op, b, _ in allocations_in(snap, "forward_backward_iter_1")
                 if op == "_scaled_mm"]
    assert scaled_mm == [T_BF16, T_BF16, T_BF16, W_BF16, T_BF16, W_BF16]
    fp8_tensors = [t for t in snap["tensors"] if t.get("subcategory") == "fp8"]
    assert sorted((t["dtype"], t["bytes"]) for t in fp8_tensors) == sorted(
        [("float8_e4m3fn", W_FP8), ("float32", max(weight_scale, BLOCK))])
    assert all(t["category"] == "parameter" for t in fp8_tensors)
    # The language server's digest carries it to the hover
    from memlens.snapshot.digest import digest

    (shown,) = digest(snap, "mlp.json")["summary"]["subcategories"]
    assert shown == {"label": "fp8 weights/scales", "atPeakBytes": W_FP8 + weight_scale,
                     "peakBytes": W_FP8 + weight_scale}


def test_force_recompute_fp8_weight_in_bwd_changes_no_byte(tmp_path):
    """torchao 0.18 already recasts the weight in backward; the flag only warns."""
    default = trace(tmp_path, MLP, "tensorwise")["summary"]
    forced = trace(tmp_path, MLP, "tensorwise", "--force-recompute")["summary"]
    assert forced["peak_bytes"] == default["peak_bytes"] == COMMON_AT_PEAK + 4 * BLOCK
    assert forced["category_peaks"] == default["category_peaks"]


def test_fp8_on_a100_is_refused_as_cuda_refuses_it(tmp_path):
    """An A100 (compute capability 8.0) has no FP8 tensor cores: torchao's training path does
    not check, and the first _scaled_mm fails with PyTorch's CUDA kernel's message."""
    out = run_memlens("run", "--device", "a100-80gb", "--no-snapshot", "--", MLP, "tensorwise")
    assert out.returncode == 1
    assert ("torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 "
            "or 8.9") in out.stderr
    assert "float8_ops.py" in out.stderr  # where torchao called it


def test_fsdp2_float8_all_gather_gathers_fp8(tmp_path):
    """torchtitan's FP8 + FSDP2 recipe on rank 0 of 2: 2 blocks of two 4096 x 4096 Linears,
    fp32 master weights sharded by rows (each rank 2048 x 4096), bf16 compute. With
    enable_fsdp_float8_all_gather each weight is cast to fp8 on its shard (2048 x 4096 x 1 =
    8 MiB), gathered in fp8 (a block's all-gather output: 2 x 4096 x 4096 x 1 = 32 MiB) and
    unsharded as fp8 (16 MiB a weight); with bf16 all-gathers the same block's output is
    2 x 4096 x 4096 x 2 = 64 MiB and each unsharded weight 32 MiB."""
    fp8_run = trace(tmp_path, FSDP, world_size=2)
    bf16_run = trace(tmp_path, FSDP, world_size=2, env={"FP8_ALL_GATHER": "0"})
    assert fp8_run["meta"]["world_size"] == 2 and fp8_run["meta"]["rank"] == 0

    def buffers(snap):
        allocs = allocations_in(snap, "forward_backward_iter_1")
        # FSDP2's buffers are `empty` (the gradients' reduce-scatter output is a gradient);
        # the unsharded parameters are `resize_`s of their storages
        empty = sorted(b for op, b, cat in allocs if op == "empty" and cat == 5)
        unsharded = [b for op, b, cat in allocs if op == "resize_" and cat == 0]
        return empty, unsharded

    # 2 blocks x (forward + backward) all-gathers; the root owns no parameter. Both runs
    # reduce-scatter a block's fp32 gradients (2 x 4096 x 4096 x 4 = 128 MiB) twice.
    reduce_scatter = [2 * W_BF16 * 2] * 2
    fp8_empty, fp8_unsharded = buffers(fp8_run)
    bf16_empty, bf16_unsharded = buffers(bf16_run)
    # fp8: the all-gather outputs only (the fp8 shard casts are the inputs)
    assert fp8_empty == sorted([2 * W_FP8] * 4 + reduce_scatter)
    # bf16: each all-gather's input (the two bf16 shard copies, 2 x 2048 x 4096 x 2 = 32 MiB)
    # and its output, twice the fp8 one
    assert bf16_empty == sorted([2 * W_BF16 // 2] * 4 + [2 * W_BF16] * 4 + reduce_scatter)
    assert fp8_unsharded == [W_FP8] * 8 and bf16_unsharded == [W_BF16] * 8
    # fp8 shard casts before each all-gather are FP8 weights (8 MiB each, 2 per all-gather)
    shard_casts = [b for op, b, cat in allocations_in(fp8_run, "forward_backward_iter_1")
                   if op == "_to_copy" and b == W_FP8 // 2 and cat == 0]
    assert shard_casts == [W_FP8 // 2] * 8
    # precompute_float8_dynamic_scale_for_fsdp: the 4 weights' scales, one (4,) fp32 tensor
    # (one block), kept on the weights until the next precompute; the second step's casts
    # use them (views: no scale of their own). At the peak (the loss's fp32 backward, no
    # weight gathered) they are the only FP8 bytes.
    sub = fp8(fp8_run)
    scales = [t for t in fp8_run["tensors"] if t.get("subcategory") == "fp8"]
    assert [(t["dtype"], t["shape"], t["bytes"]) for t in scales] == [("float32", [4], BLOCK)]
    # Most FP8 bytes at once, in the first step's backward (no precomputed scales yet: each
    # shard cast makes its own 512 B scale, which the unsharded weight keeps): block 1's two
    # unsharded fp8 weights (2 x 16 MiB) while block 0's shards are cast for the prefetched
    # all-gather (2 x 8 MiB), and 8 scales: the forward's 4 (autograd saved each unsharded
    # Float8TrainingTensor: FSDP frees its data, the scale stays), block 1's 2 and block 0's 2
    # of the backward all-gathers.
    assert sub["peak_bytes"] == 2 * W_FP8 + 2 * (W_FP8 // 2) + 8 * BLOCK
    assert fp8_peak(fp8_run) == (sub["peak_bytes"], "forward_backward_iter_0")


LLAMA = str(TESTS / "scripts" / "fp8" / "llama_block_float8.py")
# The block: h 2048, 16 heads, SwiGLU width f 5632, 2 x 2048 = 4096 tokens (N), bf16
N, H, F = 4096, 2048, 5632


@pytest.mark.parametrize("recipe,w1_scale,w2_scale,scales_at_peak", [
    # tensorwise: one fp32 scalar each; at the peak w2's weight scale, its two gradient casts'
    # and its input's: 4 blocks
    ("tensorwise", 4, BLOCK, 4 * BLOCK),
    # rowwise: w1's scale per output row (5632 x 1 fp32); at the peak w2's recast weight
    # (f x h, per row: 5632 x 4), the gradient cast for grad_input (per token: 4096 x 4), the
    # casts for grad_weight per column: the gradient's (1 x 2048 x 4) and the input's (1 x
    # 5632 x 4)
    ("rowwise", F * 4, F * 4, F * 4 + N * 4 + H * 4 + F * 4),
])
def test_llama_block_float8_recipe(tmp_path, recipe, w1_scale, w2_scale, scales_at_peak):
    fp8_run = trace(tmp_path / recipe, LLAMA, recipe)
    bf16_run = trace(tmp_path / "bf16", LLAMA, "bf16")
    summary, bf16 = fp8_run["summary"], bf16_run["summary"]
    # Parameters: 4 h x h + 3 h x f bf16 weights and two RMSNorm weights (h bf16 each)
    params = (4 * H * H + 3 * H * F) * 2 + 2 * H * 2
    assert bf16["category_peaks"]["parameter"] == params
    # torchao saves what nn.Linear saves (the bf16 input; the weight is the parameter), so
    # the saved set is the bf16 block's to the byte
    assert summary["category_peaks"]["activation"] == bf16["category_peaks"]["activation"]
    # One FP8 weight at a time: the largest, w1 or w3 or w2 (h x f fp8 = 11 MiB), and its
    # scale. Requested bytes exactly; the blocks the allocator hands out keep < 1 MiB of
    # slack each (a cached block is not split for a rest of 1 MiB or less).
    requested, phase = fp8_peak(fp8_run, "requested_bytes")
    assert requested == H * F + w1_scale
    sub = fp8(fp8_run)
    assert requested <= sub["peak_bytes"] < requested + 2 * MiB
    assert summary["category_peaks"]["parameter"] == params + sub["peak_bytes"]
    # 7 Float8Linears, 3 _scaled_mm each a step, bf16 outputs: forward wq wk wv wo (N x h)
    # w1 w3 (N x f) w2 (N x h); backward from w2 to wq, grad_input then grad_weight (out x in)
    scaled_mm = [b for op, b, _ in allocations_in(fp8_run, "forward_backward_iter_1",
                                                   key="requested_bytes") if op == "_scaled_mm"]
    nh, nf, hf, hh = N * H * 2, N * F * 2, H * F * 2, H * H * 2
    assert scaled_mm == [nh] * 4 + [nf, nf, nh] + [nf, hf] + [nh, hf] * 2 + [nh, hh] * 4
    # The peak: w2's backward (the first), casting its input (N x f) to fp8 for grad_weight.
    # Alive: the model states (bf16 parameters, AdamW's two bf16 states, no gradient yet),
    # every activation, x, both cuBLAS workspaces, w2's recast fp8 weight (its block) and
    # the scales, the loss and its seed (2 blocks), w2's grad_input (N x f bf16), the two fp8
    # casts of its incoming gradient (N x h each) and the input's cast in flight: two N x f
    # fp32 copies and the N x f fp8 one.
    w2_block = sub["at_peak_bytes"] - w2_scale  # the FP8 weight alive at the peak is w2's
    assert H * F <= w2_block < H * F + 2 * MiB
    expected = (3 * params + summary["category_peaks"]["activation"] + N * H * 2 + WORKSPACES
                + w2_block + scales_at_peak + 2 * BLOCK
                + N * F * 2 + 2 * N * H + 2 * N * F * 4 + N * F)
    assert summary["peak_bytes"] == expected
