"""Megatron-LM's entry points and integrations/megatron-lm.patch.

The megatron-core wheel has no `megatron.training`, so CI tests the entry-point path with a
stand-in of it (tests/scripts/megatron_lm_stub: the functions the plugin hooks, called in
Megatron-LM's order around a real megatron.core model). With a Megatron-LM checkout at the
patch's commit named by MEMLENS_MEGATRON_LM (and its extra dependencies on PYTHONPATH or in
MEMLENS_MEGATRON_LM_DEPS: `six`, `triton`), the real `pretrain_gpt.py` and the patch are run too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest

from conftest import REPO, TESTS
from memlens.plugins import megatron_args
from support import megatron as M

PATCH = REPO / "integrations" / "megatron-lm.patch"
COMMIT = "55ac7082517c3878ae653c07c09c534b8aed49f6"  # tag core_v0.16.1
STUB = TESTS / "scripts" / "megatron_lm_stub" / "pretrain_stub.py"
CHECKOUT = os.environ.get("MEMLENS_MEGATRON_LM")
SMALL_GPT = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers 4 "
             "--hidden-size 256 --num-attention-heads 8 --seq-length 128 "
             "--max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 16 "
             "--train-iters 100 --lr 1e-4 --bf16 --mock-data --tokenizer-type NullTokenizer "
             "--vocab-size 1024 --use-distributed-optimizer").split()

needs_megatron = M.NEEDS
needs_checkout = pytest.mark.skipif(
    not CHECKOUT or not Path(CHECKOUT, "pretrain_gpt.py").is_file(),
    reason="set MEMLENS_MEGATRON_LM to a Megatron-LM checkout at core_v0.16.1")


# -- the arguments a trace changes (pure) ----------------------------------------------------
def _args(**kw) -> Namespace:
    base = dict(world_size=64, tensor_model_parallel_size=4, pipeline_model_parallel_size=4,
                context_parallel_size=1, micro_batch_size=1, global_batch_size=1024,
                train_iters=500000, train_samples=None, lr_decay_iters=None,
                lr_warmup_fraction=None, lr_warmup_iters=2000, load="/ckpt", save="/ckpt",
                eval_iters=10, tokenizer_type="HuggingFaceTokenizer", vocab_size=None,
                transformer_impl="local", num_experts=None, num_workers=8,
                check_for_nan_in_loss_and_grad=True, mock_data=False)
    base.update(kw)
    return Namespace(**base)


def test_global_batch_fills_the_pipeline():
    args = _args()
    megatron_args.set_up(args, iterations=2)
    assert args.global_batch_size == 1 * 4 * 4  # micro-batch x DP (64 / 16) x PP micro-batches
    interleaved = _args(num_layers_per_virtual_pipeline_stage=2)
    megatron_args.set_up(interleaved, iterations=2)
    assert interleaved.global_batch_size == 1 * 4 * 8  # all-warm-up below 2 x PP


def test_training_is_cut_to_the_traced_iterations_keeping_the_schedule():
    args = _args(lr_warmup_fraction=0.01, lr_warmup_iters=0)
    megatron_args.set_up(args, iterations=2)
    assert args.train_iters == 2
    assert args.lr_decay_iters == 500000 and args.lr_warmup_iters == 5000
    assert args.lr_warmup_fraction is None
    samples = _args(train_iters=None, train_samples=10**9, lr_decay_samples=None)
    megatron_args.set_up(samples, iterations=2)
    assert samples.train_samples == 2 * samples.global_batch_size
    assert samples.lr_decay_samples == 10**9


def test_what_needs_values_or_files_is_off_and_said():
    args = _args(vocab_size=128256, num_experts=8, moe_grouped_gemm=True,
                 moe_expert_capacity_factor=None, moe_pad_expert_input_to_capacity=False)
    notes = megatron_args.set_up(args, iterations=2)
    assert (args.load, args.save, args.eval_iters, args.num_workers) == (None, None, 0, 0)
    assert args.mock_data and not args.check_for_nan_in_loss_and_grad
    assert args.tokenizer_type == "NullTokenizer"
    # MoE routing is left as configured (the plugin fixes the tokens per expert instead)
    assert (args.moe_expert_capacity_factor, args.moe_pad_expert_input_to_capacity) == (None, False)
    text = " ".join(notes)
    assert "mock data" in text and "NullTokenizer" in text and "global batch 16" in text


def test_vocab_size_without_tokenizer_type_gets_the_null_tokenizer():
    """Megatron-LM's --tokenizer-type has no default: with only --vocab-size, building the
    tokenizer would fail; mock data needs none, as when a tokenizer is named."""
    args = _args(tokenizer_type=None, vocab_size=32000)
    notes = megatron_args.set_up(args, iterations=2)
    assert args.tokenizer_type == "NullTokenizer" and args.vocab_size == 32000
    assert any("no --tokenizer-type given: NullTokenizer of --vocab-size 32000" in n
               for n in notes), notes
    untouched = _args(tokenizer_type=None, vocab_size=None)
    megatron_args.set_up(untouched, iterations=2)
    assert untouched.tokenizer_type is None  # no size to make one of: Megatron's own error


# -- the entry-point path, with the stand-in ----------------------------------------------------
@needs_megatron
def test_entry_point_every_rank(memlens, tmp_path):
    out = memlens("run", "--world-size", "4", "--ranks", "all", "--progress", "none",
                  "--snapshot", str(tmp_path / "s.json"), "--", str(STUB),
                  "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                  "--vocab-size", "1000", "--bf16", "--lr-warmup-iters", "10", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    index = json.loads((tmp_path / "s.ranks" / "index.json").read_text())
    # Megatron's layout, declared by the plugin: a rank per pipeline stage answers for its TP.
    assert [(r["rank"], r["alike"]) for r in index["ranks"]] == [(0, [0, 1]), (2, [2, 3])]
    snap = json.loads((tmp_path / "s.ranks" / "rank-2.json").read_text())
    names = [p["name"] for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]]
    assert names == ["setup_model_and_optimizer", "forward_backward_iter_0",
                     "optimizer_step_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1"]
    notes = " ".join(snap["meta"]["notes"])
    assert "mock data" in notes and "NullTokenizer" in notes and "fused (flash)" in notes
    assert snap["meta"]["parallel"]["role"].startswith("pp 1/2")


# -- the patch --------------------------------------------------------------------------------
def test_patch_is_well_formed_and_names_its_commit():
    text = PATCH.read_text()
    assert COMMIT in text and "core_v0.16.1" in text
    stat = subprocess.run(["git", "apply", "--stat", str(PATCH)], capture_output=True,
                          text=True, cwd=REPO)
    assert stat.returncode == 0, stat.stderr
    for path in ("megatron/training/arguments.py", "megatron/training/training.py",
                 "pretrain_gpt.py", "pretrain_mamba.py"):
        assert path in stat.stdout


@needs_checkout
def test_patch_applies_to_the_checkout():
    head = subprocess.run(["git", "-C", CHECKOUT, "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode == 0:
        assert head.stdout.strip() == COMMIT
    out = subprocess.run(["git", "apply", "--check", str(PATCH)], cwd=CHECKOUT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _megatron_env() -> dict:
    extra = os.environ.get("MEMLENS_MEGATRON_LM_DEPS", "")
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (extra, os.environ.get("PYTHONPATH", ""))
                                          if p)}


@needs_megatron
@needs_checkout
def test_pretrain_gpt_every_rank(memlens, tmp_path):
    out = memlens("run", "--world-size", "8", "--ranks", "all", "--progress", "none",
                  "--snapshot", str(tmp_path / "s.json"), "--",
                  str(Path(CHECKOUT, "pretrain_gpt.py")), *SMALL_GPT, cwd=tmp_path,
                  env=_megatron_env())
    assert out.returncode == 0, out.stderr[-3000:]
    index = json.loads((tmp_path / "s.ranks" / "index.json").read_text())
    assert [r["alike"] for r in index["ranks"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@needs_megatron
@needs_checkout
def test_patched_megatron_traces_itself(tmp_path):
    patched = tmp_path / "Megatron-LM"
    shutil.copytree(CHECKOUT, patched, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    subprocess.run(["git", "apply", str(PATCH)], cwd=patched, check=True)
    env = {**os.environ, **_megatron_env(), "WORLD_SIZE": "8", "RANK": "4",
           "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "4"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env["PYTHONPATH"]])
    out = subprocess.run([os.sys.executable, str(patched / "pretrain_gpt.py"), *SMALL_GPT,
                          "--memory-tracing", "--save-peak-memory-snapshot",
                          str(tmp_path / "snaps") + "/"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    snap = json.loads((tmp_path / "snaps" / "rank-4.json").read_text())
    assert snap["meta"]["rank"] == 4 and snap["meta"]["stopped_after_iterations"]
    assert snap["meta"]["parallel"]["role"].startswith("pp 1/2")


FLAG_GPT = [a for a in SMALL_GPT if a != "--use-distributed-optimizer"]
FLAG_GPT[FLAG_GPT.index("--tensor-model-parallel-size") + 1] = "1"
FLAG_GPT[FLAG_GPT.index("--pipeline-model-parallel-size") + 1] = "1"
MOE = ("--num-experts 4 --expert-model-parallel-size 2 --moe-router-topk 2 --swiglu "
       "--disable-bias-linear").split()


@needs_megatron
@needs_checkout
@pytest.mark.parametrize("flags,note", [
    # the default --gradient-accumulation-fusion with both overlaps (DP 2)
    (("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"),
     "fused weight-gradient accumulation"),
    # the TE spec (Megatron-LM's default transformer_impl) with CP 2
    (("--context-parallel-size", "2", "--overlap-grad-reduce"), "context parallelism 2"),
    # MoE: Sinkhorn (no capacity factor) with the allgather dispatcher, worst-case routing
    ((*MOE, "--moe-router-load-balancing-type", "sinkhorn", "--moe-token-dispatcher-type",
      "allgather"), "MoE routing worst"),
])
def test_pretrain_gpt_with_performance_flags(memlens, tmp_path, flags, note):
    out = memlens("run", "--world-size", "2", "--rank", "0", "--progress", "none",
                  "--snapshot", str(tmp_path / "s.json"), "--",
                  str(Path(CHECKOUT, "pretrain_gpt.py")), *FLAG_GPT, *flags, cwd=tmp_path,
                  env={**_megatron_env(), "MEMLENS_MOE_ROUTING": "worst"})
    assert out.returncode == 0, out.stderr[-3000:]
    notes = json.loads((tmp_path / "s.json").read_text())["meta"]["notes"]
    assert any(note in n for n in notes), notes
