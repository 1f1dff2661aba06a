"""FP8 as Megatron runs it with Transformer Engine (`--fp8-format hybrid`, per `--fp8-recipe`),
traced without TE: megatron.core's GPT (gpt_core_train.py, TE layer spec, 2 layers, h 256,
FFN 1024, s 128, b 2, TP 1) whose GEMMs hold what TE's linear holds (plugins/megatron/fp8*.py).

Per layer four GEMMs, weight [N, K]: QKV [768, 256], projection [256, 256], FC1 [1024, 256],
FC2 [256, 1024]: 786,432 values. Their inputs have M = s b = 256 rows: K = 256, 256, 256,
1024 columns (sbh = 65,536 values; FC2's input is 4 sbh). On H100 (sm90) a Float8Tensor's
column-wise data is a transposed copy; on B200 (sm100) it is the row-wise data itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support import megatron as M
from support.runs import run_memlens

pytestmark = [pytest.mark.slow, M.NEEDS]

LAYERS = 2
LAYER = "module.module.decoder.layers.0"
SBH = 128 * 2 * 256
WEIGHTS = 786_432  # GEMM weight values per layer
LINEARS = 4  # per layer

SETTINGS = {
    # name: (device, flags)
    "bf16-h100": ("h100-80gb", ()),
    "bf16-b200": ("b200", ()),
    "delayed-1024": ("h100-80gb", ("--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024")),
    "delayed-16": ("h100-80gb", ("--fp8-recipe", "delayed", "--fp8-amax-history-len", "16")),
    "tensorwise": ("h100-80gb", ("--fp8-recipe", "tensorwise")),
    "blockwise": ("h100-80gb", ("--fp8-recipe", "blockwise")),
    "mxfp8-b200": ("b200", ("--fp8-recipe", "mxfp8")),
    "delayed-b200": ("b200", ("--fp8-recipe", "delayed")),
}

# Bytes one layer's quantized weights take (the workspaces TE caches), derived by hand:
WEIGHT_COPIES = {
    # Float8Tensor, H100: data + transpose (2 B per value) + a 4 B scale-inverse per GEMM.
    "delayed-1024": 2 * WEIGHTS + 4 * LINEARS,  # 1,572,880
    "delayed-16": 2 * WEIGHTS + 4 * LINEARS,
    "tensorwise": 2 * WEIGHTS + 4 * LINEARS,
    # 128 x 128 blocks, fp32 scales, padded to 4 blocks: row-wise [N/128, K/128 -> 4],
    # column-wise [K/128, N/128 -> 4]: QKV 6x4 + 2x8 = 40, proj 2x4 + 2x4 = 16,
    # FC1 8x4 + 2x8 = 48, FC2 2x8 + 8x4 = 48 scales: 152 x 4 B = 608 B.
    "blockwise": 2 * WEIGHTS + 608,  # 1,573,472
    # Two usages of one byte per value, each with one E8M0 byte per 32 values (the paddings
    # to [128, 4] and [4, 128] add nothing at these sizes): 2 x 786,432 / 32 = 49,152 B.
    "mxfp8-b200": 2 * WEIGHTS + 49_152,  # 1,622,016
    # Blackwell: the row-wise data serves both GEMM layouts, no transpose.
    "delayed-b200": WEIGHTS + 4 * LINEARS,  # 786,448
}

# Delayed scaling's state per GEMM: fp32 scales of its 3 forward and 2 backward quantizers and
# an amax history of L rows of each: 4 x (5 + 5 L) B.
SCALING_STATE = {"delayed-1024": LINEARS * 4 * (5 + 5 * 1024),  # 82,000 per layer
                 "delayed-16": LINEARS * 4 * (5 + 5 * 16),  # 1,360
                 "delayed-b200": LINEARS * 4 * (5 + 5),  # 160
                 "tensorwise": 0, "blockwise": 0, "mxfp8-b200": 0}

# What backward keeps of the GEMM inputs: the column-wise part only (the forward GEMM's
# row-wise part is dropped). The four inputs hold 3 sbh + 4 sbh = 7 sbh values.
SAVED_INPUTS = {
    # Float8Tensor: one byte per value and a 4 B scale-inverse each (H100: the transpose;
    # B200: the data).
    "delayed-1024": 7 * SBH + 4 * LINEARS,  # 458,768
    "delayed-16": 7 * SBH + 4 * LINEARS,
    "tensorwise": 7 * SBH + 4 * LINEARS,
    "delayed-b200": 7 * SBH + 4 * LINEARS,
    # 1 x 128 blocks, column-wise scales [M/128, K -> 4] in fp32: 2 x (256 + 256 + 256 +
    # 1024) x 4 B = 14,336 B.
    "blockwise": 7 * SBH + 14_336,  # 473,088
    # One E8M0 byte per 32 rows, column-wise [M/32 -> 4, K -> 128]: 8 x 1,792 = 14,336 B.
    "mxfp8-b200": 7 * SBH + 14_336,
}
# ... instead of the bf16 inputs only the GEMMs kept: both norms' outputs (2 sbh each) and the
# activation's output (8 sbh). The projection's bf16 input stays: attention keeps its output.
BF16_INPUTS = (2 + 2 + 8) * SBH  # bytes: 786,432


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp8")
    cache: dict = {}

    def get(setting: str) -> dict:
        if setting not in cache:
            device, flags = SETTINGS[setting]
            fp8 = ("--fp8-format", "hybrid", *flags) if flags else ()
            cache[setting] = _trace(tmp, device, 1, "--layers", str(LAYERS), "--spec", "te",
                                    *fp8)
        return cache[setting]

    return get


def _trace(tmp, device: str, world: int, *args: str) -> dict:
    snap = tmp / f"{device}-{abs(hash(args)) % 10**8}.json"
    out = run_memlens("run", "--device", device, "--world-size", str(world), "--rank", "0",
                      "--progress", "none", "--snapshot", str(snap), "--", str(M.SCRIPT),
                      *args, cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


def _baseline(setting: str) -> str:
    return "bf16-b200" if SETTINGS[setting][0] == "b200" else "bf16-h100"


def _alive_at_end(snap: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in M._rows(snap):
        if r["free_seq"] < 0:
            name = M.CATEGORIES[r["category"]]
            out[name] = out.get(name, 0) + r["requested_bytes"]
    return out


FP8 = [s for s in SETTINGS if not s.startswith("bf16")]


# The same, allocated (512 B blocks), which the "fp8 weights/scales" subcategory of parameters
# reports: data, transposes and MXFP8's scales are multiples of 512 B here; every scale-inverse
# (Float8Tensor's, blockwise's 8 scale tensors) and delayed scaling's scales take a block, its
# histories 1024 x 3 x 4 = 12,288 and 1024 x 2 x 4 = 8,192 B (16 rows: a block each).
FP8_ALLOCATED = {
    "delayed-1024": 2 * WEIGHTS + 4 * 512 + 4 * (512 + 12_288 + 512 + 8_192),  # 1,660,928
    "delayed-16": 2 * WEIGHTS + 4 * 512 + 4 * 4 * 512,  # 1,583,104
    "tensorwise": 2 * WEIGHTS + 4 * 512,  # 1,574,912
    "blockwise": 2 * WEIGHTS + 8 * 512,  # 1,576,960
    "mxfp8-b200": 2 * WEIGHTS + 49_152,  # 1,622,016
    "delayed-b200": WEIGHTS + 4 * 512 + 4 * 4 * 512,  # 796,672
}


def _fp8_subcategory(snap: dict) -> dict:
    subs = [s for s in snap["summary"].get("subcategories", ()) if s["name"] == "fp8"]
    assert len(subs) == 1 and subs[0]["category"] == "parameter", snap["summary"]
    return subs[0]


@pytest.mark.parametrize("setting", FP8)
def test_weight_copies_and_scaling_state_are_tes(snapshots, setting):
    """The bf16 parameters stay (the optimizer updates them); each GEMM adds its quantized
    weight and its scaling state, parameters of the "fp8 weights/scales" subcategory kept
    from the first forward on."""
    snap = snapshots(setting)
    fp8, bf16 = _alive_at_end(snap), _alive_at_end(snapshots(_baseline(setting)))
    assert fp8["parameter"] - bf16["parameter"] == \
        LAYERS * (WEIGHT_COPIES[setting] + SCALING_STATE[setting])
    assert fp8.get("buffer", 0) == bf16.get("buffer", 0)
    assert fp8["gradient"] == bf16["gradient"]
    assert fp8["optimizer_state"] == bf16["optimizer_state"]
    sub = _fp8_subcategory(snap)
    assert sub["at_peak_bytes"] == sub["peak_bytes"] == LAYERS * FP8_ALLOCATED[setting]


@pytest.mark.parametrize("setting", FP8)
def test_gemm_inputs_are_saved_in_fp8(snapshots, setting):
    fp8 = M.layer_activation_bytes(snapshots(setting), LAYER)
    bf16 = M.layer_activation_bytes(snapshots(_baseline(setting)), LAYER)
    assert fp8 == bf16 - BF16_INPUTS + SAVED_INPUTS[setting], (fp8, bf16)


def test_amax_history_length_moves_the_peak_by_its_buffers(snapshots):
    """Allocated (512 B blocks) per GEMM: 1024 rows: scales 512 + 512, histories 12,288 +
    8,192 = 21,504 B; 16 rows: four blocks of 512 = 2,048 B. The peak differs by exactly that,
    19,456 B x 4 GEMMs x 2 layers = 155,648 B; tensorwise holds no state at all: 2,048 B
    x 8 fewer than delayed with 16 rows."""
    long, short = snapshots("delayed-1024"), snapshots("delayed-16")
    tensorwise = snapshots("tensorwise")
    assert long["summary"]["peak_bytes"] - short["summary"]["peak_bytes"] == 155_648
    assert short["summary"]["peak_bytes"] - tensorwise["summary"]["peak_bytes"] == 2_048 * 8


def test_fp8_peak_is_the_bf16_peak_with_the_fp8_tensors(snapshots):
    """The peak is at the end of the last forward: the weight copies add, the saved inputs
    shrink by 12 sbh bf16 for 7 sbh FP8 per layer. Allocated bytes (512 B blocks) of the
    delayed scaling with 16 rows on H100, per layer: weight copies 393,216 + 131,072 + 524,288
    x 2 (data and transposes: multiples of 512) + 4 x 512 (scale-inverses) = 1,574,912;
    scaling state 4 x 2,048 = 8,192; saved inputs 7 sbh + 4 x 512 = 460,800; minus the bf16
    inputs 786,432."""
    fp8, bf16 = snapshots("delayed-16"), snapshots("bf16-h100")
    per_layer = 1_574_912 + 8_192 + 460_800 - 786_432
    assert fp8["summary"]["peak_bytes"] - bf16["summary"]["peak_bytes"] == LAYERS * per_layer


def test_fp8_gemms_take_tes_gemm_workspace(snapshots):
    """TE runs its FP8 GEMMs on the cuBLASLt workspace of its bf16 ones (general_gemm; TE
    2.10: one per device, 32 MiB + 1 KiB on H100): the FP8 stand-in, which makes its outputs
    without a matmul op, takes it at its first GEMM, once, as the bf16 layers' matmuls do."""
    for setting in ("delayed-16", "bf16-h100"):
        snap = snapshots(setting)
        a = snap["allocations"]
        sizes = [a["requested_bytes"][i] for i, op in enumerate(a["op"])
                 if snap["ops"][op] == "te_cublas_workspace"]
        assert sizes == [32 * 2**20 + 1024], setting


@pytest.mark.parametrize("device,recipe,message", [
    ("a100-80gb", "delayed", "Device compute capability 8.9 or higher required for FP8 "
     "execution."),
    ("h100-80gb", "mxfp8", "Device compute capability 10.0 or higher required for MXFP8 "
     "execution."),
])
def test_fp8_on_a_gpu_without_it_is_refused_with_tes_message(tmp_path, device, recipe, message):
    out = run_memlens("run", "--device", device, "--world-size", "1", "--progress", "none",
                      "--no-snapshot", "--",
                      str(M.SCRIPT), "--layers", "1", "--spec", "te", "--fp8-format", "hybrid",
                      "--fp8-recipe", recipe, cwd=tmp_path)
    assert out.returncode == 1
    assert message in out.stderr, out.stderr[-2000:]


def test_fp8_parameters_are_one_byte_in_ddps_buffer(tmp_path):
    """--fp8-param-gather (config fp8_param) with the distributed optimizer, DP 2, delayed
    scaling: the GEMM weights are FP8 parameters. Parameters: 2 x 786,432 GEMM values of one
    byte in DDP's buffer, one byte more for each one's transpose (H100) and 4 B scale-inverse
    per GEMM (8), delayed scaling's state 4 x (5 + 5) B per GEMM, the other 564,224 values in
    bf16: 1,572,864 x 2 + 32 + 320 + 1,128,448 = 4,274,528 B. Gradients (fp32) and the optimizer's shard (12 B / 2 per value of all
    2,137,088) are as without: the main parameters are fp32 whatever the model's dtype."""
    args = ("--layers", "2", "--spec", "te", "--distributed-optimizer")
    fp8 = _trace(tmp_path, "h100-80gb", 2, *args, "--fp8-format", "hybrid", "--fp8-param")
    got = _alive_at_end(fp8)
    params = 2 * WEIGHTS + 564_224
    assert got["parameter"] == 2 * WEIGHTS * 2 + 4 * 8 + 8 * 4 * (5 + 5) + 2 * 564_224
    # FP8 weights and scales: the FP8 buffer, the transposes, 8 scale-inverses and 8 x 4
    # scaling buffers of a block each.
    assert _fp8_subcategory(fp8)["at_peak_bytes"] == 2 * WEIGHTS * 2 + 8 * 512 + 8 * 4 * 512
    assert got["gradient"] == 4 * params
    assert got["optimizer_state"] == 12 * params // 2
    assert any(n.startswith("--fp8-param-gather") for n in fp8["meta"]["notes"])


def test_sequence_parallel_gathers_fp8_and_keeps_the_local_copy(tmp_path):
    """TP 2 with sequence parallelism and gradient accumulation fusion, delayed scaling.
    Float8Tensor cannot all-gather column-wise data: the QKV and FC1 inputs are quantized
    row-wise on each rank's s/2 rows, gathered in FP8, and the local copy is saved (sbh/2 B
    each); the projection's and FC2's inputs (full sequence, K halved) are saved as transposes
    (sbh/2 and 2 sbh B); 4 scale-inverses. Instead of the bf16 inputs (norm outputs sbh/2 x 2
    B each, the activation's output 8 sbh/2 B): 3.5 sbh + 16 - 6 sbh per layer. Weight copies:
    2 B per value of the TP shard (786,432 / 2) and 4 scale-inverses per layer. Gradients: TE's
    dummy weight gradient for DDP's hooks, one bf16 tensor per GEMM shape (QKV [384, 256],
    projection [256, 128], FC1 [512, 256], FC2 [256, 512]; the output layer's [512, 256] is
    FC1's), shared by the layers: 786,432 B, in bf16 as in FP8 (Megatron's own linear layers
    take TE's dummy where TE is installed, as on a GPU)."""
    args = ("--layers", "2", "--spec", "te", "--tp", "2", "--sp", "--grad-accum-fusion")
    bf16 = _trace(tmp_path, "h100-80gb", 2, *args)
    fp8 = _trace(tmp_path, "h100-80gb", 2, *args, "--fp8-format", "hybrid")
    layer = M.layer_activation_bytes(fp8, LAYER) - M.layer_activation_bytes(bf16, LAYER)
    assert layer == 7 * SBH // 2 + 16 - 6 * SBH
    got, base = _alive_at_end(fp8), _alive_at_end(bf16)
    assert got["parameter"] - base["parameter"] == \
        LAYERS * (WEIGHTS + 16 + SCALING_STATE["delayed-b200"])  # history 1: 160 B a layer
    dummies = 2 * (384 * 256 + 256 * 128 + 512 * 256 + 256 * 512)
    assert got["gradient"] == base["gradient"]
    assert base["gradient"] - 2 * base["parameter"] == dummies  # fp32 main grads: 4 B, bf16 2 B


# -- Megatron-LM's own FP8 example, unmodified ------------------------------------------------
CHECKOUT = os.environ.get("MEMLENS_MEGATRON_LM")
LLAMA3_FP8 = Path("examples", "llama", "train_llama3_8b_h100_fp8.sh")


@pytest.mark.skipif(not CHECKOUT or not Path(CHECKOUT, LLAMA3_FP8).is_file(),
                    reason="set MEMLENS_MEGATRON_LM to a Megatron-LM checkout at core_v0.16.1")
def test_megatron_lms_llama3_8b_fp8_example(tmp_path):
    """examples/llama/train_llama3_8b_h100_fp8.sh as shipped: Llama-3 8B (32 layers, h 4096,
    FFN 14,336 SwiGLU, 32 heads, 8 query groups of 128, s 8192, b 1, vocab 128,256, untied),
    TP 1 on 8 GPUs (DP 8), the distributed optimizer, bf16 gradients, --fp8-format hybrid,
    delayed scaling with --fp8-amax-history-len 1024, --fp8-param-gather. Run from a copy of
    the checkout made of links (the script makes its checkpoint and cache folders in the
    working directory), rank 0 on H100.

    By hand, per layer (sbh = 8192 x 4096 values; bf16 2 B, FP8 1 B):
    - the two residual sums (the next LayerNorms' inputs) 2 x 2 sbh, the LayerNorms' fp32 mean
      and rstd 2 x 2 x 4 sb = 65,536 x 2;
    - the four GEMMs' inputs in FP8, column-wise (4 B scale-inverse each): sbh + 4 (QKV),
      sbh + 4 (projection), sbh + 4 (FC1), 14,336 sb + 4 (FC2);
    - fused attention: q 2 sbh, k and v 2 x 2 sb x 1024 (8 groups), output 2 sbh, fp32
      log-sum-exp 4 x 32 x s, the kernel's Philox seed and offset 16 + 8 B;
    - SwiGLU's input, FC1's output: 2 x 2 x 14,336 sb.
    = 991,035,432 B. FP8 weights and scales: the 6,979,321,856 GEMM values one byte in DDP's
    buffer and one in their transposes, 128 scale-inverses, scaling state 32 x 4 GEMMs x
    4 x (5 + 5 x 1024) B requested (allocated in 512 B blocks: scales 512 + 512, histories
    12,288 + 8,192 = 21,504 B a GEMM): 13,958,643,712 + 128 x 512 + 128 x 21,504 B, and DDP's
    bucket padding. Parameters: those (requested: 13,958,643,712 + 512 + 2,624,000) and
    1,051,205,632 other values in bf16: 16,063,679,488 B, and the padding."""
    copy = tmp_path / "Megatron-LM"
    copy.mkdir()
    for entry in Path(CHECKOUT).iterdir():
        if entry.name != ".git":
            (copy / entry.name).symlink_to(entry.resolve())
    extra = os.environ.get("MEMLENS_MEGATRON_LM_DEPS", "")
    env = {"PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (extra, os.environ.get("PYTHONPATH", ""))
                                         if p)}
    snap_path = tmp_path / "rank0.json"
    out = run_memlens("run", "--progress", "none", "--rank", "0", "--snapshot", str(snap_path),
                      "--from-script", str(LLAMA3_FP8), cwd=copy, env=env, timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    snap = json.loads(snap_path.read_text())
    assert M.layer_activation_bytes(snap, "module.module.decoder.layers.0") == 991_035_432
    fp8 = _fp8_subcategory(snap)["at_peak_bytes"]
    assert 13_958_643_712 + 128 * (512 + 21_504) <= fp8 <= 13_958_643_712 * 1.001, fp8
    params = M.model_state_bytes(snap)["parameter"]
    assert 16_063_679_488 <= params <= 16_063_679_488 * 1.001, params
