"""Megatron-LM's parsed arguments, set up for a memory trace (before Megatron validates them).

Pure: takes the argparse namespace `megatron.training.arguments.parse_args` made, changes it in
place, and returns what it changed, in words, for the snapshot's `meta.notes`. Only what a trace
cannot do (read data or checkpoints, log to services, check values) or does not need (more than
the traced iterations) is changed; the model, the parallel layout, precision, recomputation and
the optimizer are the user's.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

# Set whatever the user gave: (attribute, value, why). Attributes a Megatron-LM version does
# not have are skipped.
_OFF = (
    ("load", None, None), ("pretrained_checkpoint", None, None), ("save", None, None),
    ("save_interval", None, None), ("non_persistent_save_interval", None, None),
    ("exit_interval", None, None), ("exit_duration_in_mins", None, None),
    ("exit_signal_handler", False, None), ("eval_iters", 0, None),
    ("tensorboard_dir", None, None), ("wandb_project", "", None), ("wandb_exp_name", "", None),
    ("enable_one_logger", False, None), ("enable_ft_package", False, None),
    ("profile", False, None), ("use_pytorch_profiler", False, None),
    ("check_for_nan_in_loss_and_grad", False, None), ("check_for_spiky_loss", False, None),
    ("check_for_large_grads", False, None), ("rerun_mode", "disabled", None),
    ("log_straggler", False, None), ("num_workers", 0, None), ("rampup_batch_size", None, None),
    ("mock_data", True, None),
)


def set_up(args: Any, iterations: int) -> list[str]:
    """Change `args` for a trace of `iterations` training iterations; returns notes."""
    notes = ["Megatron-LM run for a trace: mock data, no checkpoint load or save, no "
             "evaluation, no logging services, no NaN/inf or spiky-loss checks (they read "
             "values a trace does not have), dataset helpers not compiled"]
    for name, value, _ in _OFF:
        if hasattr(args, name):
            setattr(args, name, value)
    notes.append(_batch(args))
    _iterations(args, iterations)
    notes += _tokenizer(args) + _implementation(args) + _moe(args)
    return [n for n in notes if n]


def microbatches(args: Any) -> int:
    """Just enough micro-batches for the pipeline's steady state on every stage: the depth for
    1F1B; twice it for the interleaved schedule (with only `pp` micro-batches it runs all of
    them as warm-up and holds less than in steady state)."""
    pp = int(getattr(args, "pipeline_model_parallel_size", 1) or 1)
    if pp == 1:
        return 1
    interleaved = bool(getattr(args, "num_layers_per_virtual_pipeline_stage", None) or
                       getattr(args, "num_virtual_stages_per_pipeline_rank", None))
    return 2 * pp if interleaved else pp


def _batch(args: Any) -> str:
    tp = int(getattr(args, "tensor_model_parallel_size", 1) or 1)
    pp = int(getattr(args, "pipeline_model_parallel_size", 1) or 1)
    cp = int(getattr(args, "context_parallel_size", 1) or 1)
    dp = max(1, int(args.world_size) // (tp * pp * cp))
    n = microbatches(args)
    before = getattr(args, "global_batch_size", None)
    args.global_batch_size = args.micro_batch_size * dp * n
    return (f"global batch {args.global_batch_size} = micro-batch {args.micro_batch_size} x "
            f"DP {dp} x {n} micro-batches (enough to fill the pipeline; memory does not grow "
            f"with more)" + (f", instead of {before}" if before and before !=
                              args.global_batch_size else ""))


def _iterations(args: Any, iterations: int) -> None:
    """Train for the traced iterations only, keeping the learning-rate schedule's length (a
    schedule shorter than its warm-up fails Megatron's checks)."""
    if getattr(args, "train_samples", None):
        if hasattr(args, "lr_decay_samples") and not args.lr_decay_samples:
            args.lr_decay_samples = args.train_samples
        args.train_samples = iterations * args.global_batch_size
        return
    if hasattr(args, "lr_decay_iters") and not args.lr_decay_iters and args.train_iters:
        args.lr_decay_iters = args.train_iters
    if getattr(args, "lr_warmup_fraction", None) is not None and args.train_iters:
        # A fraction of the user's schedule, not of the traced iterations.
        args.lr_warmup_iters = int(args.lr_warmup_fraction * (args.lr_decay_iters or
                                                              args.train_iters))
        args.lr_warmup_fraction = None
    args.train_iters = iterations


def _tokenizer(args: Any) -> list[str]:
    """Mock data needs no text: with a vocabulary size Megatron's NullTokenizer stands in for
    a tokenizer whose files may not be here."""
    kind = getattr(args, "tokenizer_type", None)
    if kind == "NullTokenizer" or not getattr(args, "vocab_size", None):
        return []
    args.tokenizer_type = "NullTokenizer"
    was = f"tokenizer {kind} replaced by" if kind else "no --tokenizer-type given:"
    return [f"{was} NullTokenizer of --vocab-size {args.vocab_size} (mock data needs no text)"]


def _implementation(args: Any) -> list[str]:
    if getattr(args, "transformer_impl", "local") != "transformer_engine" or \
            find_spec("transformer_engine") is not None:
        return []
    args.transformer_impl = "local"  # the plugin notes it, with how attention is held
    return []


def _moe(args: Any) -> list[str]:
    if not getattr(args, "num_experts", None):
        return []
    notes = []  # routing is left as configured: the plugin fixes the tokens per expert
    if getattr(args, "moe_grouped_gemm", False) and find_spec("transformer_engine") is None \
            and find_spec("grouped_gemm") is None:
        args.moe_grouped_gemm = False
        notes.append("experts run one after another (SequentialMLP): grouped GEMM needs "
                     "Transformer Engine or grouped_gemm; the same weights and activations")
    return notes
