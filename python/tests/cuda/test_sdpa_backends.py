"""Which kernel scaled_dot_product_attention runs on the simulated GPU, as torch 2.13's CUDA 13
build would pick it (memlens/cuda/sdpa.py), and what each kernel keeps for backward.

In-process: the selection rules on meta tensors (no trace needed). End to end:
scripts/sdpa_block.py, one attention block in bf16 with batch 2, 4 heads, 100 tokens, head size
64, causal, traced for one iteration."""

import json
import os

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from support.paths import TESTS
from memlens.cuda import sdpa

SCRIPT = TESTS / "scripts" / "sdpa_block.py"
HOPPER, AMPERE, B300, RTX_5090 = (9, 0), (8, 0), (10, 3), (12, 0)
ACTIVATION, TEMPORARY = 4, 5


def qkv(heads_kv=4, d=64, dtype=torch.bfloat16, s=100):
    q = torch.empty(2, 4, s, d, device="meta", dtype=dtype, requires_grad=True)
    k = torch.empty(2, heads_kv, s, d, device="meta", dtype=dtype, requires_grad=True)
    return q, k, torch.empty_like(k, requires_grad=True)


def pick(cc, *tensors, mask=None, dropout=0.0, gqa=False, pinned=None):
    q, k, v = tensors or qkv()
    b = sdpa.select_backend(q, k, v, mask, dropout, True, gqa, cc,
                            sdpa.BY_NAME[pinned] if pinned else None)
    return sdpa.NAMES[b]


@pytest.fixture(autouse=True)
def default_environment(monkeypatch):
    monkeypatch.delenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", raising=False)


# -- selection ------------------------------------------------------------------------------
def test_cudnn_first_on_hopper_and_blackwell_flash_elsewhere():
    assert [pick(cc) for cc in (HOPPER, (10, 0), B300, AMPERE, (8, 9), RTX_5090)] == [
        "cudnn", "cudnn", "cudnn", "flash", "flash", "flash"]


def test_deprioritizing_cudnn_gives_torchs_default_order(monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
    assert pick(HOPPER) == "flash"
    assert "TORCH_CUDNN_SDPA_DEPRIORITIZED=1" in sdpa.order_reason(HOPPER, None)


def test_the_scripts_toggles_are_honoured():
    try:
        torch.backends.cuda.enable_cudnn_sdp(False)
        assert pick(HOPPER) == "flash"
        torch.backends.cuda.enable_flash_sdp(False)
        assert pick(HOPPER) == "efficient"
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        assert pick(HOPPER) == "math"
        torch.backends.cuda.enable_math_sdp(False)
        with pytest.raises(RuntimeError, match="No available kernel"):
            pick(HOPPER)
    finally:
        for enable in (torch.backends.cuda.enable_cudnn_sdp, torch.backends.cuda.enable_flash_sdp,
                       torch.backends.cuda.enable_mem_efficient_sdp,
                       torch.backends.cuda.enable_math_sdp):
            enable(True)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        assert pick(HOPPER) == "efficient"
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], set_priority=True):
        assert pick(HOPPER) == "math"  # the script's priority, not cuDNN's
    assert pick(HOPPER) == "cudnn"  # and all of it undone on exit


def test_the_pin_goes_first_where_the_kernel_can_run():
    assert [pick(HOPPER, pinned=p) for p in ("flash", "efficient", "cudnn", "math")] == [
        "flash", "efficient", "cudnn", "math"]
    q, k, v = qkv(heads_kv=2)  # grouped-query attention: the efficient kernel has none in 2.13
    assert pick(HOPPER, q, k, v, gqa=True, pinned="efficient") == "cudnn"
    assert pick(AMPERE, q, k, v, gqa=True, pinned="efficient") == "flash"
    with sdpa_kernel([SDPBackend.MATH]):  # the script's own choice still holds
        assert pick(HOPPER, pinned="flash") == "math"


def test_constraints_of_each_kernel():
    fp32 = qkv(dtype=torch.float32)
    assert pick(HOPPER, *fp32) == "efficient"  # flash and cuDNN are fp16/bf16 only
    assert pick(HOPPER, *qkv(d=256)) == "flash"  # cuDNN: head size <= 128 (cuDNN 9.1x)
    assert pick(HOPPER, *qkv(d=60)) == "flash"  # cuDNN: head size a multiple of 8
    assert pick(HOPPER, *qkv(d=288)) == "efficient"  # flash: head size <= 256; efficient: any
    bias = torch.empty(2, 4, 100, 100, device="meta", dtype=torch.bfloat16)
    assert pick(AMPERE, mask=bias) == "efficient"  # flash takes no mask
    assert pick(HOPPER, dropout=0.1) == "flash"  # cuDNN dropout comes in steps of 1/16
    assert pick(HOPPER, dropout=0.125) == "cudnn"
    q, k, v = qkv(heads_kv=2)
    assert pick(HOPPER, q, k, v, gqa=True) == "cudnn"  # cuDNN has GQA (torch 2.13)


# -- what each kernel keeps (end to end) ----------------------------------------------------
def trace(memlens, tmp_path, *args, device="h100-80gb", env=None):
    path = tmp_path / "s.json"
    out = memlens("run", "--device", device, "--iterations", "1", "--snapshot", str(path), *args,
                  env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(path.read_text()), out.stdout


def of_op(snap, op, backward=0):
    a = snap["allocations"]
    return [(a["requested_bytes"][i], a["category"][i]) for i in range(len(a["bytes"]))
            if snap["ops"][a["op"][i]] == op and a["backward"][i] == backward]


# b*s*h*d bf16 output = 2*100*4*64*2; fp32 logsumexp/stats per (b, h, query)
OUT, LSE = 102_400, 2 * 4 * 100 * 4
SAVED = {  # backend -> (aten op, bytes of its outputs, all kept for backward)
    "flash": ("_scaled_dot_product_flash_attention", [OUT, LSE, 16, 8]),  # + Philox seed pair, offset
    "efficient": ("_scaled_dot_product_efficient_attention",
                  [OUT, 2 * 4 * 128 * 4, 8, 8]),  # logsumexp padded to 32 queries: 100 -> 128
    "cudnn": ("_scaled_dot_product_cudnn_attention", [OUT, LSE, 8, 8]),  # stats (b,h,s,1); seed, offset
}


@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
def test_each_fused_kernel_keeps_its_output_and_softmax_statistics(memlens, tmp_path, backend):
    snap, out = trace(memlens, tmp_path, "--sdpa-backend", backend, "--", str(SCRIPT))
    op, saved = SAVED[backend]
    outputs = [(n, c) for n, c in of_op(snap, op) if n]  # flash's empty debug mask: no bytes
    assert outputs == [(n, ACTIVATION) for n in saved]
    meta = snap["meta"]["sdpa"]
    assert (meta["calls"], meta["pinned"], meta["order"][0]) == ({backend: 1}, backend, backend)
    assert f"attention (SDPA) ran on {backend} (1 call): pinned to {backend}" in out


def test_flash_backward_takes_its_fp32_workspaces(memlens, tmp_path):
    snap, _ = trace(memlens, tmp_path, "--sdpa-backend", "flash", "--", str(SCRIPT))
    grads = of_op(snap, "_scaled_dot_product_flash_attention_backward", backward=1)
    # dq, dk, dv; softmax_d (b, h, s rounded to 128) fp32; dq_accum (b, 128, h, 64) fp32
    assert [n for n, _ in grads] == [OUT] * 3 + [2 * 4 * 128 * 4, 2 * 128 * 4 * 64 * 4]
    assert {c for _, c in grads[3:]} == {TEMPORARY}


def test_flash_splits_the_keys_when_the_batch_leaves_sms_idle():
    from memlens.kernels.cuda import flash_num_splits

    # b*h*ceil(s_q/64) blocks of queries against 2 x SMs: 2*4*16 = 128 of 264 on an H100 with
    # ceil(1024/256) = 4 key blocks: 1 split fills 48 % of a wave, 2 fill 97 %: 2 splits.
    assert flash_num_splits(128, 264, 4) == 2
    # an A100 (2 x 108): 1 or 2 splits fill 59 % of the last wave, 4 fill 79 % (3 is no split)
    assert flash_num_splits(128, 216, 4) == 4
    assert flash_num_splits(16, 216, 1) == 1  # one key block: nothing to split
    assert flash_num_splits(212, 264, 8) == 1  # at least 80 % of the SMs busy: no split


def test_flash_forward_takes_fp32_partial_results_per_split(memlens, tmp_path):
    snap, _ = trace(memlens, tmp_path, "--sdpa-backend", "flash", "--", str(SCRIPT), "--seq", "1024")
    made = of_op(snap, "_scaled_dot_product_flash_attention")
    # 2 splits (above); softmax_lse_accum 2*b*h*s*4 and out_accum 2*b*h*s*64*4, both freed
    assert [n for n, c in made if c == TEMPORARY and n] == [2 * 2 * 4 * 1024 * 4,
                                                            2 * 2 * 4 * 1024 * 64 * 4]
    assert [n for n, c in made if c == ACTIVATION] == [2 * 1024 * 4 * 64 * 2, 2 * 4 * 1024 * 4,
                                                       16, 8]


def test_math_keeps_the_s_by_s_probabilities(memlens, tmp_path):
    snap, _ = trace(memlens, tmp_path, "--sdpa-backend", "math", "--", str(SCRIPT))
    # The math path computes in fp32: the softmax output, b*h*s*s*4 = 2*4*100*100*4 bytes.
    assert of_op(snap, "_safe_softmax") == [(2 * 4 * 100 * 100 * 4, ACTIVATION)]
    assert not any(of_op(snap, op) for op, _ in SAVED.values())


@pytest.mark.parametrize("args, env, calls, reason", [
    ([], None, {"cudnn": 1}, "cuDNN first: torch 2.13.0 built with CUDA 13 prefers cuDNN"),
    (["--toggle", "deprioritize"], None, {"flash": 1}, "TORCH_CUDNN_SDPA_DEPRIORITIZED=1"),
    (["--toggle", "no-cudnn-no-flash"], None, {"efficient": 1}, "cuDNN first"),
    (["--toggle", "only-math"], None, {"math": 1}, "cuDNN first"),
])
def test_the_script_decides_as_on_the_gpu(memlens, tmp_path, args, env, calls, reason):
    snap, _ = trace(memlens, tmp_path, "--", str(SCRIPT), *args, env=env)
    meta = snap["meta"]["sdpa"]
    assert meta["calls"] == calls and reason in meta["reason"]
    if "no-cudnn-no-flash" in args:
        assert meta["disabled_by_script"] == ["cudnn", "flash"]


def test_the_recipe_pins_the_backend(memlens, tmp_path):
    (tmp_path / "attn.py").write_text(
        "import torch, torch.nn as nn, torch.nn.functional as F\n"
        "class Attn(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.qkv = nn.Linear(256, 768, dtype=torch.bfloat16)\n"
        "    def forward(self, x):\n"
        "        q, k, v = (t.view(2, 100, 4, 64).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))\n"
        "        return F.scaled_dot_product_attention(q, k, v)\n")
    (tmp_path / "memlens.toml").write_text(
        '[[model]]\ntarget = "attn.py:Attn"\nsdpa_backend = "efficient"\noptimizer = "sgd"\n'
        'inputs = [{shape = [2, 100, 256], dtype = "bfloat16"}]\n')
    out = memlens("trace", str(tmp_path / "attn.py") + ":Attn", "--device", "h100-80gb",
                  "--iterations", "1", "--snapshot", str(tmp_path / "s.json"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    meta = json.loads((tmp_path / "s.json").read_text())["meta"]["sdpa"]
    assert (meta["calls"], meta["pinned"]) == ({"efficient": 1}, "efficient")
