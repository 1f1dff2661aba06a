"""Megatron-LM's entry points and integrations/megatron-lm.patch.

The megatron-core wheel has no `megatron.training`, so CI tests the entry-point path with a
stand-in of it (tests/scripts/megatron_lm_stub: the functions the plugin hooks, called in
Megatron-LM's order around a real megatron.core model). With a Megatron-LM checkout at the
patch's commit named by MEMLENS_MEGATRON_LM (and its extra dependencies on PYTHONPATH or in
MEMLENS_MEGATRON_LM_DEPS: `six`, `triton`), the real `pretrain_gpt.py` and the patch are run too.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest

from support.paths import REPO, TESTS
from memlens.plugins.megatron import args as megatron_args
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


# -- the arguments a trace changes, after Megatron validated them ------------------------------
def _args(**kw) -> Namespace:
    """Validated arguments (what validate_args leaves: the data-parallel and virtual-pipeline
    sizes derived) of a 64-GPU job, TP 4, PP 4."""
    base = dict(world_size=64, rank=0, tensor_model_parallel_size=4,
                pipeline_model_parallel_size=4, context_parallel_size=1, data_parallel_size=4,
                virtual_pipeline_model_parallel_size=None,
                microbatch_group_size_per_vp_stage=None, micro_batch_size=1,
                global_batch_size=1024, rampup_batch_size=None, train_iters=500000,
                train_samples=None, lr_decay_iters=None, lr_warmup_fraction=None,
                lr_warmup_iters=2000, load="/ckpt", save="/ckpt", eval_iters=10,
                tokenizer_type="NullTokenizer", vocab_size=32000,
                transformer_impl="local", num_experts=None, num_workers=8,
                check_for_nan_in_loss_and_grad=True, mock_data=False, data_path=None,
                split=None)
    base.update(kw)
    return Namespace(**base)


@needs_megatron
def test_global_batch_is_the_users_with_fewer_micro_batches_only_where_stages_hold_the_same():
    # 1024 / (1 x DP 4) = 256 micro-batches; 1F1B holds min(PP - stage, N): 4 are as many.
    args = _args()
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert args.global_batch_size == 4 * 1 * 4 and args.micro_batch_size == 1
    assert "global batch 1024 = 256 micro-batches" in notes and "traced 4 per iteration" in notes
    # Fewer micro-batches than stages (8 / 4 = 2): traced as the user gives them.
    small = _args(global_batch_size=8)
    assert "traced" not in " ".join(megatron_args.set_up(small, iterations=2))
    assert small.global_batch_size == 8
    # Interleaved, 2 chunks in groups of PP 4: 8 micro-batches (2 groups) go through every
    # stage's in-flight states of 256 (fewest_alike, checked against Megatron below).
    inter = _args(virtual_pipeline_model_parallel_size=2)
    megatron_args.set_up(inter, iterations=2)
    assert inter.global_batch_size == 8 * 1 * 4
    # 2 micro-batches, under a group: Megatron's schedule refuses them; left for it to say so.
    refused = _args(virtual_pipeline_model_parallel_size=2, global_batch_size=8)
    megatron_args.set_up(refused, iterations=2)
    assert refused.global_batch_size == 8
    # The output layer's weight gradients deferred to the pipeline flush: the last stage
    # keeps up to --wgrad-deferral-limit micro-batches' inputs and output gradients, so all
    # 256 are traced (Megatron's CI configuration gpt3_mcore_te_tp2_pp2_defer_embedding_wgrad
    # _compute with 2 of its 4 traced peaked one 206 MB output gradient under its H100's).
    deferred = _args(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=2)
    assert "traced" not in " ".join(megatron_args.set_up(deferred, iterations=2))
    assert deferred.global_batch_size == 1024


@needs_megatron
def test_the_schedule_model_holds_what_megatron_schedules():
    """megatron_schedule's in-flight micro-batches per stage against megatron.core's own
    warm-up counts (get_pp_rank_microbatches: warm-up + 1, or all in warm-up), 1F1B and
    interleaved, batches under and over the pipeline's depth; and the fewer micro-batches
    traced go through the very same in-flight states on every stage."""
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches

    from memlens.plugins.megatron.schedule import (Pipeline, fewest_alike, held,
                                                   most_in_flight, runs)

    checked = 0
    for stages, chunks, group in ((2, 1, None), (4, 1, None), (2, 2, None), (4, 2, None),
                                  (4, 3, 5), (3, 4, 6)):
        p = Pipeline(stages, chunks, group)
        for n in range(1, 30):
            if not runs(p, n):
                continue
            for stage in range(stages):
                comm = Namespace(pp_group=Namespace(size=lambda: stages, rank=lambda: stage),
                                 virtual_pipeline_model_parallel_size=chunks if chunks > 1
                                 else None)
                total, all_warmup, warmup, _ = get_pp_rank_microbatches(
                    n, chunks, p.group_size, p2p_communicator=comm)
                assert most_in_flight(p, stage, n) == (total if all_warmup else warmup + 1)
                checked += 1
            m = fewest_alike(p, n)
            assert m <= n and runs(p, m)
            assert all(held(p, s, m) == held(p, s, n) for s in range(stages))
    assert checked == 318  # (stage, count) pairs that run
    assert fewest_alike(Pipeline(16), 1536) == 16  # the 175B example: PP 16, 1536 per step
    assert fewest_alike(Pipeline(4), 2) == 2  # under the depth: the user's count
    assert fewest_alike(Pipeline(4, 2), 8) == 8  # interleaved: no fewer hold the same
    assert fewest_alike(Pipeline(4, 2), 3) == 3  # under a group: Megatron's own error


@needs_megatron
def test_a_batch_megatron_rejects_is_rejected_by_megatron():
    """1030 is not a multiple of micro-batch x DP (4): Megatron's own micro-batch calculator
    says so, before the trace changes the batch."""
    with pytest.raises(AssertionError, match="1030"):
        megatron_args.set_up(_args(global_batch_size=1030), iterations=2)
    # (1024 - 16) is no multiple of 10: a ramp-up that does not reach the batch in its steps.
    # megatron-core 0.18 replaced the ramp-up by --step-batch-size-schedule: its calculator
    # warns of a ramp-up and ignores it, so nothing is rejected there (as in Megatron).
    from megatron.core import num_microbatches_calculator as calc

    ramp = _args(train_iters=None, train_samples=10**6, rampup_batch_size=["16", "10", "1000"])
    if "step_batch_size_schedule" in inspect.signature(
            calc.init_num_microbatches_calculator).parameters:
        megatron_args.set_up(ramp, iterations=2)
        assert ramp.global_batch_size == 16  # 1024 / 4 = 256 micro-batches, 4 traced (PP 4)
    else:
        with pytest.raises(AssertionError, match="increment"):
            megatron_args.set_up(ramp, iterations=2)


@needs_megatron
def test_ramp_up_is_traced_at_the_full_batch_and_said():
    args = _args(train_iters=None, train_samples=10**9, lr_decay_samples=None,
                 rampup_batch_size=["16", "16", "5859375"], global_batch_size=1536)
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert args.rampup_batch_size is None
    assert "ramp-up from 16 by 16 over 5859375 samples: traced at the full global batch 1536" \
        in notes
    # 1536 / 4 = 384 micro-batches per iteration, 4 traced (1F1B, PP 4).
    assert args.global_batch_size == 16 and "global batch 1536 = 384 micro-batches" in notes
    assert args.train_samples == 2 * 16 and args.lr_decay_samples == 10**9


@needs_megatron
def test_a_step_batch_size_schedule_is_traced_at_its_largest_batch_and_said():
    """0.18's --step-batch-size-schedule (thresholds in samples or tokens, then the global
    batch): the largest, 1536 = 384 micro-batches of 1 x DP 4, of which 4 are traced (1F1B,
    PP 4), as with a ramp-up."""
    schedule = "0:16 2.4B:320 4.8B:1024 9.6B:1536"
    args = _args(train_iters=None, train_samples=10**9, lr_decay_samples=None,
                 global_batch_size=4, step_batch_size_schedule=schedule, seq_length=2048)
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert args.step_batch_size_schedule is None
    assert f"step batch-size schedule {schedule!r}: traced at its largest global batch 1536" \
        in notes
    assert args.global_batch_size == 16 and "global batch 1536 = 384 micro-batches" in notes


@needs_megatron
def test_training_is_cut_to_the_traced_iterations_keeping_the_schedule():
    args = _args(lr_warmup_fraction=0.01, lr_warmup_iters=0)
    megatron_args.set_up(args, iterations=2)
    # Megatron's scheduler takes the warm-up fraction of lr_decay_iters: the user's length.
    assert args.train_iters == 2 and args.lr_decay_iters == 500000
    assert args.lr_warmup_fraction == 0.01


@needs_megatron
def test_every_data_source_is_replaced_by_mock_batches_and_said():
    """Megatron accepts one data source; whichever the user gave (checked by Megatron as
    given), the trace's is mock batches, and only it."""
    args = _args(data_path=["0.7", "/d/a_text_document", "0.3", "/d/b_text_document"],
                 split="949,50,1", data_cache_path="/cache", train_data_path=None,
                 per_split_data_args_path=None, data_args_path=None, fim_data=False)
    notes = megatron_args.set_up(args, iterations=2)
    assert (args.mock_data, args.data_path, args.split, args.data_cache_path) == \
        (True, None, None, None)
    assert any("replacing --data-path, --data-cache-path, --split: a trace reads no data" in n for n in notes), notes
    split = _args(train_data_path=["/d/train"], valid_data_path=["/d/valid"],
                  test_data_path=None, per_split_data_args_path=None)
    megatron_args.set_up(split, iterations=2)
    assert split.mock_data and split.train_data_path is None and split.valid_data_path is None


def test_a_mock_batch_is_held_by_nobody_once_handed_out():
    """Megatron-LM's get_batch writes its GPU copies into the dict the iterator gave it; a
    DataLoader keeps no reference to that dict, so the copies die with the step. So must the
    mock iterator: it kept the last batch alive (4.3 MB past the step in Megatron's CI
    configuration gpt3_mcore_te_tp1_pp1_dist_optimizer_fim_dataset)."""
    import weakref

    import torch

    from memlens.plugins.megatron.data import mock_iterator

    batches = mock_iterator(object(), Namespace(micro_batch_size=2, seq_length=8,
                                                padded_vocab_size=16,
                                                create_attention_mask_in_dataloader=True))
    batch = next(batches)
    assert batch["tokens"].shape == (2, 8) and batch["attention_mask"].shape == (2, 1, 8, 8)
    batch["tokens"] = copy = batch["tokens"].clone()  # as get_batch's `.cuda()` does
    alive = weakref.ref(copy)
    del batch, copy
    assert alive() is None


def test_mock_batches_are_what_the_models_dataset_yields():
    """BERT's and T5's scripts broadcast their datasets' keys (`broadcast_data`, int64): the
    mock batch has each key at the dataset's shape, T5's decoder at its own length."""
    from memlens.plugins.megatron.data import mock_iterator

    args = Namespace(micro_batch_size=2, seq_length=8, decoder_seq_length=4,
                     padded_vocab_size=16, create_attention_mask_in_dataloader=True)
    shapes = {family: {k: (tuple(v.shape), v.dtype) for k, v in
                       next(mock_iterator(object(), args, family)).items()}
              for family in ("bert", "t5")}
    import torch

    i64 = torch.int64
    assert shapes["bert"] == {"text": ((2, 8), i64), "types": ((2, 8), i64),
                              "labels": ((2, 8), i64), "is_random": ((2,), i64),
                              "padding_mask": ((2, 8), i64), "loss_mask": ((2, 8), i64),
                              "truncated": ((2,), i64)}
    assert shapes["t5"] == {"text_enc": ((2, 8), i64), "text_dec": ((2, 4), i64),
                            "labels": ((2, 4), i64), "loss_mask": ((2, 4), i64),
                            "truncated": ((2,), i64), "enc_mask": ((2, 8), i64),
                            "dec_mask": ((2, 4), i64)}


@needs_megatron
@pytest.mark.slow  # traces in a fresh process
def test_a_later_tensor_parallel_rank_receives_the_batch_into_one_buffer(tmp_path):
    """broadcast_data on a TP rank other than the first reads the batch's sizes out of the
    broadcast tensor (values a trace does not have: the script's shape check failed). Now it
    reads them off its own mock batch, after the same broadcast, and receives the batch as
    on a GPU: the sizes (6 keys x 5 dims, int64), then one flat int64 buffer of all 10,244
    elements (no per-key copies: those are the first rank's), then the script's float mask."""
    script = TESTS / "scripts" / "megatron" / "bert_batch_broadcast.py"
    snap = M.trace(tmp_path, 2, 1, script=script)
    rows = [(r["requested_bytes"], r["free_seq"] >= 0) for r in M._rows(snap)]
    assert rows == [(6 * 5 * 8, True), (10_244 * 8, False), (4 * 512 * 4, False)]


@needs_megatron
def test_the_model_family_is_read_through_megatrons_wrappers():
    """setup_model_and_optimizer returns the chunks wrapped (DDP around Float16Module, each
    with `.module`); the family is the innermost model's."""
    from types import SimpleNamespace

    from megatron.core.models.bert.bert_model import BertModel
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.models.T5.t5_model import T5Model

    from memlens.plugins.megatron.data import model_family

    def wrapped(cls):  # an instance, not built: only its class is read
        return [SimpleNamespace(module=SimpleNamespace(module=cls.__new__(cls)))]

    assert [model_family(wrapped(c)) for c in (BertModel, T5Model, GPTModel)] == \
        ["bert", "t5", "gpt"]


@needs_megatron
def test_what_needs_values_or_files_is_off_and_said():
    args = _args(tokenizer_type="HuggingFaceTokenizer", vocab_size=128256, num_experts=8,
                 moe_grouped_gemm=True, test_mode=True, moe_permute_fusion=True,
                 moe_expert_capacity_factor=None, moe_pad_expert_input_to_capacity=False)
    notes = megatron_args.set_up(args, iterations=2)
    assert (args.load, args.save, args.eval_iters, args.num_workers) == (None, None, 0, 0)
    assert args.mock_data and not args.check_for_nan_in_loss_and_grad
    # --test-mode's real-time tests assert the QK-norm weights are equal across replicas
    assert args.test_mode is False and "--test-mode checks" in notes[0]
    # TE's fused permutation: Megatron's unfused one, which keeps the same permuted tokens
    assert args.moe_permute_fusion is False
    assert any("--moe-permute-fusion is Transformer Engine's kernel" in n for n in notes)
    assert (args.tokenizer_type, args.vocab_size) == ("NullTokenizer", 128255)  # + its EOD
    # MoE routing is left as configured (the plugin fixes the tokens per expert instead)
    assert (args.moe_expert_capacity_factor, args.moe_pad_expert_input_to_capacity) == (None, False)
    text = " ".join(notes)
    assert "mock batches" in text and "NullTokenizer" in text


@needs_megatron
def test_recomputing_grouped_experts_activation_runs_on_te_grouped_linear_stand_in():
    """--recompute-modules moe_act recomputes TEGroupedMLP's activation. With TE's layers asked
    for, the grouped experts stay (Megatron's TEGroupedMLP on the stand-in for TE's
    GroupedLinear, unfused) and it is said; with --transformer-impl local and no grouped_gemm package
    they would run as SequentialMLP, which Megatron's config then refuses with a message that
    blames the configuration: memlens says what it is."""
    from memlens.errors import MemlensError

    moe = dict(num_experts=8, moe_grouped_gemm=True, recompute_modules=["moe_act"],
               moe_expert_capacity_factor=None, moe_pad_expert_input_to_capacity=False)
    args = _args(transformer_impl="transformer_engine", use_transformer_engine_op_fuser=True,
                 **moe)
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert args.moe_grouped_gemm is True and args.transformer_impl == "local"
    assert "stand-in for TE's GroupedLinear" in notes
    # TE's op fuser has no stand-in: TEGroupedMLP's unfused path, which keeps the same tensors
    assert args.use_transformer_engine_op_fuser is False and "unfused path" in notes
    with pytest.raises(MemlensError, match=r"--recompute-modules moe_act .* --transformer-impl "
                                           r"local needs the grouped_gemm package"):
        megatron_args.set_up(_args(**moe), iterations=2)


@needs_megatron
def test_fp4_without_transformer_engine_is_refused_not_traced_in_bf16():
    from memlens.errors import MemlensError

    with pytest.raises(MemlensError, match="--fp4-format nvfp4 needs Transformer Engine"):
        megatron_args.set_up(_args(fp4="nvfp4", transformer_impl="transformer_engine"), 2)


@needs_megatron
@pytest.mark.parametrize("impl", ["local", "full_iteration"])
def test_megatrons_own_cuda_graphs_are_refused_by_name_not_traced_without_them(impl):
    """--cuda-graph-impl local (what --enable-cuda-graph becomes after validate_args) would hold
    a private pool a trace without graphs leaves out: an error naming the flag, not a smaller
    job."""
    from memlens.errors import MemlensError

    with pytest.raises(MemlensError, match=f"--cuda-graph-impl {impl} captures the layers"):
        megatron_args.set_up(_args(cuda_graph_impl=impl), 2)
    megatron_args.set_up(_args(cuda_graph_impl="none"), 2)  # the default traces


@needs_megatron
@pytest.mark.parametrize("warmup, iterations, traced, warmup_traced", [
    (3, 2, 3, 2),  # Megatron's default warm-up: the first eager step, a steady one, a graphed
    (1, 2, 2, 1),  # the capture within the requested iterations: as asked
    (2, 2, 3, 2),
    (10, 5, 5, 4),  # more iterations asked: the warm-up cut to all but the last
    (0, 2, 2, 0)])
def test_te_cuda_graphs_are_traced_through_the_capture_and_a_graphed_step(
        warmup, iterations, traced, warmup_traced):
    """--cuda-graph-impl transformer_engine captures after --cuda-graph-warmup-steps eager
    steps: the trace runs as many as it takes to reach the capture and one graphed step,
    cutting the warm-up to the first eager step and a steady one (each later eager step holds
    what the second does), and says so."""
    args = _args(cuda_graph_impl="transformer_engine", cuda_graph_warmup_steps=warmup)
    assert megatron_args.traced_iterations(args, iterations) == traced
    notes = megatron_args.set_up(args, traced)
    assert args.cuda_graph_warmup_steps == warmup_traced and args.train_iters == traced
    assert any(n.startswith("--cuda-graph-impl transformer_engine: the layers are captured")
               and f"{traced} iterations" in n for n in notes)


@needs_megatron
def test_fp8_without_transformer_engine_is_left_to_the_stand_ins():
    """FP8's tensors are modelled (plugins/megatron/fp8*.py, test_megatron_fp8.py): the
    arguments stay the user's, the TE layers become the local ones."""
    args = _args(fp8="hybrid", fp8_recipe="delayed", transformer_impl="transformer_engine")
    megatron_args.set_up(args, 2)
    assert (args.fp8, args.fp8_recipe, args.transformer_impl) == ("hybrid", "delayed", "local")


@needs_megatron
@pytest.mark.parametrize("kind,file_arg,tokens", [
    ("GPT2BPETokenizer", "vocab_file", 50257),  # the GPT-3 example's gpt2-vocab.json
    ("Llama2Tokenizer", "tokenizer_model", 32000),  # the Mixtral example's sentencepiece model
])
def test_a_one_vocabulary_tokenizer_without_its_file_is_its_size(tmp_path, kind, file_arg, tokens):
    """NullTokenizer(n) has n + 1 tokens (an end-of-document one): n is one fewer."""
    args = _args(tokenizer_type=kind, vocab_size=None, **{file_arg: str(tmp_path / "absent")})
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert (args.tokenizer_type, args.vocab_size) == ("NullTokenizer", tokens - 1)
    assert f"NullTokenizer of its {tokens} tokens" in notes


@needs_megatron
@pytest.mark.parametrize("kind,published,added", [
    ("BertWordPieceLowerCase", 30522, 0),  # BERT's CI configurations: bert-large-uncased
    ("BertWordPieceCase", 28996, 100),  # T5's: bert-large-cased, and <extra_id_0..99>
])
def test_a_wordpiece_tokenizer_is_its_files_size_and_never_built(tmp_path, kind, published,
                                                                 added):
    """Megatron builds BERT's and T5's tokenizers through Hugging Face's AutoTokenizer, which
    asks the Hub for the named model's configuration even with a --vocab-file: they are
    never built in a trace. The size is the file's, one token a line (the user's own
    vocabulary), or the published file's when it is not here."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"token{i}\n" for i in range(1000)) + "\n")  # a blank last line
    args = _args(tokenizer_type=kind, vocab_size=None, vocab_file=str(vocab))
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert (args.tokenizer_type, args.vocab_size) == ("NullTokenizer", 1000 + added - 1)
    assert f"NullTokenizer of the 1000 tokens of {vocab}" in notes
    absent = _args(tokenizer_type=kind, vocab_size=None, vocab_file=str(tmp_path / "no.txt"))
    notes = " ".join(megatron_args.set_up(absent, iterations=2))
    assert absent.vocab_size == published + added - 1
    assert f"NullTokenizer of the {published} tokens of bert-large-" in notes
    assert f"{tmp_path / 'no.txt'} is not here" in notes


@needs_megatron
def test_a_tokenizer_whose_file_is_not_here_asks_for_the_vocabulary_size(tmp_path):
    from memlens.errors import MemlensError

    missing = str(tmp_path / "tokenizer.json")
    with pytest.raises(MemlensError, match=r"HuggingFaceTokenizer reads its vocabulary .*"
                                           r"tokenizer.json.*--vocab-size N"):
        megatron_args.set_up(_args(tokenizer_type="HuggingFaceTokenizer", vocab_size=None,
                                   tokenizer_model=missing), 2)
    # With the size given, no file is read: n tokens, as the user's tokenizer has.
    args = _args(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=missing,
                 vocab_size=128_256)
    notes = " ".join(megatron_args.set_up(args, iterations=2))
    assert (args.tokenizer_type, args.vocab_size) == ("NullTokenizer", 128_255)
    assert "HuggingFaceTokenizer replaced by NullTokenizer of --vocab-size 128256" in notes


@needs_megatron
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
LAUNCH = STUB.parent / "launch_pretrain.sh"
TP_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # what Megatron asks of a TP job


@needs_megatron
@pytest.mark.slow  # traces in a fresh process
def test_te_grouped_gemm_experts_keep_their_four_workspaces(memlens, tmp_path):
    """--moe-grouped-gemm with TE's layers: TEGroupedMLP's GEMMs take one workspace per
    compute stream (4) of TE's size, 32 MiB + 1 KiB on an H100, at the first MoE layer, kept
    to the end, beside TE's one for the other GEMMs. The experts are Megatron's TEGroupedMLP on
    the stand-in for TE's GroupedLinear (Megatron's CI MoE configurations were 134 MB under
    their H100 golden values without the workspaces)."""
    snapshot = tmp_path / "s.json"
    out = memlens("run", "--world-size", "2", "--rank", "0", "--progress", "none",
                  "--snapshot", str(snapshot), "--", str(STUB), "--num-experts", "4",
                  "--moe-grouped-gemm", "--disable-bias-linear", "--vocab-size", "1000", "--bf16",
                  "--train-iters", "100",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    snap = json.loads(snapshot.read_text())
    kept = {}
    for r in M._rows(snap):
        name = snap["ops"][r["op"]]
        if name in ("te_grouped_gemm_workspace", "te_cublas_workspace"):
            assert r["free_seq"] < 0  # kept to the end
            kept.setdefault(name, []).append(r["requested_bytes"])
    assert kept == {"te_grouped_gemm_workspace": [32 * 2**20 + 1024] * 4,
                    "te_cublas_workspace": [32 * 2**20 + 1024]}
    assert "stand-in for TE's GroupedLinear" in " ".join(snap["meta"]["notes"])


@needs_megatron
@pytest.mark.slow  # traces in a fresh process
def test_entry_point_every_rank(memlens, tmp_path):
    out = memlens("run", "--world-size", "4", "--ranks", "all", "--jobs", "2", "--progress",
                  "none", "--snapshot", str(tmp_path / "s.json"), "--", str(STUB),
                  "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                  "--vocab-size", "1000", "--bf16", "--lr-warmup-iters", "10",
                  "--train-iters", "100", cwd=tmp_path, env=TP_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    index = json.loads((tmp_path / "s.ranks" / "index.json").read_text())
    # Megatron's layout, declared by the plugin: a rank per pipeline stage answers for its TP;
    # the last rank, traced beside rank 0, for the last stage.
    assert [(r["rank"], r["alike"]) for r in index["ranks"]] == [(0, [0, 1]), (3, [2, 3])]
    snap = json.loads((tmp_path / "s.ranks" / "rank-3.json").read_text())
    names = [p["name"] for p in snap["phases"] if p["device"] == snap["meta"]["device_key"]]
    assert names == ["setup_model_and_optimizer", "forward_backward_iter_0",
                     "optimizer_step_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1"]
    notes = " ".join(snap["meta"]["notes"])
    assert "mock batches" in notes and "NullTokenizer" in notes and "fused (flash)" in notes
    assert snap["meta"]["parallel"]["role"].startswith("pp 1/2")


def _gathered_at_end(snap: dict) -> int:
    """Bytes of Megatron-FSDP's all-gathered parameter buckets alive when the trace ended."""
    names = [f["name"] for f in snap["frames"]]
    return sum(r["requested_bytes"] for r in M._rows(snap) if r["free_seq"] < 0 and
               "fetch_bucket" in {names[k] for k in snap["stacks"][r["stack"]]})


@needs_megatron
def test_the_trace_ends_where_megatron_lm_logs_memory(memlens, tmp_path):
    """Megatron-LM reads an iteration's memory in training_log, after train_step and, with
    --log-params-norm, after the parameters' norm, which makes Megatron-FSDP release the
    parameters its optimizer step all-gathered for the next forward (stop_communication). The
    trace ends there: without the norm the buckets are still gathered when Megatron logs; with
    it they are released, and what is left besides is the norm's fp32 scalar (4 B) the loop
    holds."""
    def trace(*extra):
        snap_path = tmp_path / f"s{len(extra)}.json"
        out = memlens("run", "--world-size", "2", "--rank", "0", "--progress", "none",
                      "--snapshot", str(snap_path), "--", str(STUB), "--use-megatron-fsdp",
                      "--data-parallel-sharding-strategy", "optim_grads_params",
                      "--num-layers", "4", "--vocab-size", "1000", "--bf16",
                      "--train-iters", "100", "--lr-warmup-iters", "10", *extra, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        snap = json.loads(snap_path.read_text())
        return snap, sum(r["requested_bytes"] for r in M._rows(snap) if r["free_seq"] < 0)

    plain, plain_end = trace()
    norm, norm_end = trace("--log-params-norm")
    gathered = _gathered_at_end(plain)
    assert gathered > 0 and _gathered_at_end(norm) == 0
    assert norm_end == plain_end - gathered + 4
    assert norm["meta"]["stopped_after_iterations"] is True


@needs_megatron
def test_a_launch_script_as_shipped(memlens, tmp_path):
    """Our launch script in Megatron's examples' style: arrays unquoted and quoted, exports
    Megatron checks in the rank's environment (CUDA_DEVICE_MAX_CONNECTIONS for TP 2, NCCL_ALGO
    for --deterministic-mode: the stand-in's validate_args asserts both), a blended --data-path
    with --split and --data-cache-path, checkpoints to save and load."""
    out = memlens("run", "--ranks", "all", "--jobs", "2", "--progress", "none", "--snapshot",
                  str(tmp_path / "s.json"), "--from-script", str(LAUNCH), "--",
                  "/data/corpus", str(tmp_path / "ckpt"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    index = json.loads((tmp_path / "s.ranks" / "index.json").read_text())
    assert [(r["rank"], r["alike"]) for r in index["ranks"]] == [(0, [0, 1]), (3, [2, 3])]
    assert sorted(p.name for p in (tmp_path / "s.ranks").glob("rank-*.json")) == [
        "rank-0.json", "rank-3.json"]
    notes = " ".join(json.loads((tmp_path / "s.ranks" / "rank-0.json").read_text())
                     ["meta"]["notes"])
    assert "replacing --data-path, --data-cache-path, --split: a trace reads no data" in notes
    # 32 / (1 x DP 1) micro-batches; 1F1B on PP 2 holds min(2 - stage, N): 2 traced.
    assert "global batch 32 = 32 micro-batches of 1 x DP 1 per iteration; traced 2" in notes
    assert not (tmp_path / "ckpt").exists()  # no checkpoint saved


@needs_megatron
@pytest.mark.parametrize("ranks", [["--rank", "2"], ["--ranks", "all"]])
def test_what_megatron_rejects_fails_naming_the_rank(memlens, tmp_path, ranks):
    """Batch ramp-up with --train-iters: Megatron refuses it (the stand-in as Megatron does),
    so the trace does too, with its message and the rank."""
    out = memlens("run", *ranks, "--progress", "none", "--no-snapshot", "--from-script",
                  str(LAUNCH), "--", "/data/corpus", str(tmp_path / "ckpt"),
                  "--rampup-batch-size", "16", "16", "1000", cwd=tmp_path)
    assert out.returncode == 1
    rank = ranks[1] if ranks[1] != "all" else "0"
    assert f"pretrain_stub.py (rank {rank} of 4) raised AssertionError: no batch ramp-up " \
           "with --train-iters" in out.stdout + out.stderr, out.stderr[-3000:]


@needs_megatron
@pytest.mark.parametrize("ranks", [["--rank", "3"], ["--ranks", "all"]])
def test_an_argparse_error_shows_argparse_line(memlens, tmp_path, ranks):
    out = memlens("run", *ranks, "--progress", "none", "--no-snapshot", "--from-script",
                  str(LAUNCH), "--", "/data/corpus", str(tmp_path / "ckpt"), "--foo",
                  cwd=tmp_path)
    assert out.returncode == 1
    rank = ranks[1] if ranks[1] != "all" else "0"
    assert f"pretrain_stub.py (rank {rank} of 4) exited with status 2: pretrain_stub.py: " \
           "error: unrecognized arguments: --foo" in out.stdout + out.stderr, out.stderr[-3000:]


def _stage_activations(memlens, folder, stages, *flags) -> list[int]:
    """The most activation bytes each pipeline stage of the stand-in holds (one layer per
    stage, h 128, s 64, micro-batch 1), traced for every stage."""
    out = memlens("run", "--world-size", str(stages), "--ranks", "all", "--progress", "none",
                  "--snapshot", str(folder / "s.json"), "--", str(STUB),
                  "--pipeline-model-parallel-size", str(stages), "--num-layers", str(stages),
                  "--train-iters", "100", "--vocab-size", "1000", *flags, cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads((folder / "s.ranks" / f"rank-{r}.json").read_text())["summary"]
            ["category_peaks"]["activation"] for r in range(stages)]


@needs_megatron
def test_stages_hold_the_micro_batches_megatron_schedule_holds(memlens, tmp_path):
    """PP 3, 1F1B. The in-flight micro-batches per stage are Megatron's: its warm-up count + 1
    (get_pp_rank_microbatches), for a user batch of 2 (under the pipeline's depth) and of 9
    (over it: traced as 3). One micro-batch's activations per stage come from a run of one."""
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches

    def in_flight(stage, n):
        comm = Namespace(pp_group=Namespace(size=lambda: 3, rank=lambda: stage),
                         virtual_pipeline_model_parallel_size=None)
        total, all_warmup, warmup, _ = get_pp_rank_microbatches(n, 1, 3, p2p_communicator=comm)
        return total if all_warmup else warmup + 1

    assert [in_flight(s, 2) for s in range(3)] == [2, 2, 1]
    assert [in_flight(s, 9) for s in range(3)] == [3, 2, 1]
    runs = {}
    for n in (1, 2, 9):
        (tmp_path / str(n)).mkdir()
        runs[n] = _stage_activations(memlens, tmp_path / str(n), 3, "--global-batch-size",
                                     str(n))
    one = runs[1]
    # Stage 0 only runs forwards, then backwards: exactly count x one micro-batch's.
    assert runs[2][0] == in_flight(0, 2) * one[0] and runs[9][0] == in_flight(0, 9) * one[0]
    assert runs[2][1] == in_flight(1, 2) * one[1]
    # Later stages, once they alternate a forward and a backward, hold one more tensor of the
    # pipeline's communication ([s, b, h] bf16: 64 x 1 x 128 x 2 B = 16,384 B).
    recv = 64 * 1 * 128 * 2
    assert runs[9][1] == in_flight(1, 9) * one[1] + recv
    assert runs[2][2] == runs[9][2] == in_flight(2, 9) * one[2] + recv


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
@pytest.mark.slow  # traces in a fresh process
def test_pretrain_gpt_every_rank(memlens, tmp_path):
    out = memlens("run", "--world-size", "8", "--ranks", "all", "--progress", "none",
                  "--snapshot", str(tmp_path / "s.json"), "--",
                  str(Path(CHECKOUT, "pretrain_gpt.py")), *SMALL_GPT, cwd=tmp_path,
                  env=_megatron_env())
    assert out.returncode == 0, out.stderr[-3000:]
    index = json.loads((tmp_path / "s.ranks" / "index.json").read_text())
    assert [r["alike"] for r in index["ranks"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


# Ours, in the style of Megatron-LM's example launch scripts (examples/gpt3): exports, arrays
# expanded unquoted and quoted, a data prefix, checkpoint and TensorBoard paths as arguments.
REAL_LAUNCH = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_ALGO=Tree
MEGATRON=$1
CHECKPOINT_PATH=$2
TENSORBOARD_LOGS_PATH=$3
DATA_PATH=$4
shift 4
DISTRIBUTED_ARGS=(--nproc_per_node 8 --nnodes 1 --master_addr localhost --master_port 6000)
GPT_MODEL_ARGS=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128
    --max-position-embeddings 128 --attention-backend auto)
TRAINING_ARGS=(--micro-batch-size 2 --global-batch-size 64 --rampup-batch-size 16 16 4096
    --train-samples 100000 --lr 1e-4 --lr-decay-style cosine --lr-warmup-fraction .01 --bf16
    --deterministic-mode)
MODEL_PARALLEL_ARGS=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
DATA_ARGS=(--data-path 0.6 "${DATA_PATH}_a" 0.4 "${DATA_PATH}_b" --split 949,50,1
    --data-cache-path "$CHECKPOINT_PATH/cache" --tokenizer-type GPT2BPETokenizer
    --vocab-file "$DATA_PATH.vocab.json" --merge-file "$DATA_PATH.merges.txt" --vocab-size 1024)
EVAL_AND_LOGGING_ARGS=(--log-interval 100 --save-interval 10000 --eval-interval 1000
    --save "$CHECKPOINT_PATH" --load "$CHECKPOINT_PATH" --eval-iters 10
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH")
cd "$MEGATRON"
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py "${GPT_MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" \\
    ${MODEL_PARALLEL_ARGS[@]} "${DATA_ARGS[@]}" ${EVAL_AND_LOGGING_ARGS[@]} "$@"
"""


def _real_launch(memlens, tmp_path, *flags, extra=()):
    script = tmp_path / "train_gpt.sh"
    script.write_text(REAL_LAUNCH)
    return memlens("run", "--progress", "none", *flags, "--from-script", str(script), "--",
                   str(Path(CHECKOUT).resolve()), str(tmp_path / "ckpt"), str(tmp_path / "tb"),
                   str(tmp_path / "corpus"), *extra, cwd=tmp_path, env=_megatron_env())


@needs_megatron
@needs_checkout
def test_real_launch_script_with_data_ramp_up_and_exports(memlens, tmp_path):
    """TP 2 (CUDA_DEVICE_MAX_CONNECTIONS) and --deterministic-mode (NCCL_ALGO) pass Megatron's
    own checks from the script's exports; a blended --data-path is replaced by mock batches;
    the ramp-up (sample-based) is traced at the full batch 64: 64 / (2 x DP 2) = 16 micro-batches,
    1F1B on PP 2 holds min(2 - stage, N): 2 traced."""
    out = _real_launch(memlens, tmp_path, "--rank", "4", "--snapshot", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr[-3000:]
    notes = " ".join(json.loads((tmp_path / "s.json").read_text())["meta"]["notes"])
    assert "replacing --data-path, --data-cache-path, --split" in notes, notes
    assert "ramp-up from 16 by 16 over 4096 samples: traced at the full global batch 64" in notes
    assert "global batch 64 = 16 micro-batches of 2 x DP 2 per iteration; traced 2" in notes


@needs_megatron
@needs_checkout
@pytest.mark.parametrize("extra, message", [
    (["--train-iters", "1000"],
     "raised AssertionError: expected iteration-based training"),
    (["--foo"], "exited with status 2: pretrain_gpt.py: error: unrecognized arguments: --foo"),
])
def test_real_megatron_rejections_name_the_rank(memlens, tmp_path, extra, message):
    """--train-iters beside the script's --train-samples: Megatron's validate_args refuses it;
    an unknown flag: argparse's own line."""
    out = _real_launch(memlens, tmp_path, "--rank", "6", "--no-snapshot", extra=extra)
    assert out.returncode == 1
    assert f"pretrain_gpt.py (rank 6 of 8) {message}" in out.stderr, out.stderr[-3000:]


@needs_megatron
@needs_checkout
@pytest.mark.slow  # traces in a fresh process
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
