"""Megatron-LM's parsed arguments, set up for a memory trace, after Megatron validated them.

Megatron's validate_args sees the user's arguments as given, so a configuration Megatron rejects
is rejected; then `set_up` changes, in place, only what a trace cannot do (read data or
checkpoints, log to services, check values) or does not need (more than the traced iterations,
more micro-batches than fill the pipeline: batch.py), and returns what it changed, in
words, for the snapshot's `meta.notes`. The model, the parallel layout, precision,
recomputation and the optimizer are the user's.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from typing import Any

from ...errors import MemlensError
from . import batch as megatron_batch

# Tokenizers of one vocabulary, whose size a trace can take without their file:
# type -> (tokens, the argument naming the file, what the file is).
FIXED_VOCABULARIES = {
    "GPT2BPETokenizer": (50257, "vocab_file", "GPT-2's vocabulary file"),  # gpt2-vocab.json
    "Llama2Tokenizer": (32000, "tokenizer_model", "Llama 2's tokenizer model"),  # and Mixtral's
}

# WordPiece tokenizers (BERT's and T5's): type -> (the published vocabulary's tokens, what it
# is, tokens Megatron adds). Megatron (0.19) builds them through Hugging Face's AutoTokenizer,
# which fetches the named model's configuration from the Hub even with a --vocab-file, so they
# are not built in a trace: their size is the file's (one token a line) or, without it, the
# published file's.
WORDPIECE_VOCABULARIES = {
    "BertWordPieceLowerCase": (30522, "bert-large-uncased's vocabulary", 0),
    "BertWordPieceCase": (28996, "bert-large-cased's vocabulary", 100),  # <extra_id_0..99>
}

# Set whatever the user gave. Attributes a Megatron-LM version does not have are skipped.
_OFF = (
    ("load", None), ("pretrained_checkpoint", None), ("save", None),
    ("save_interval", None), ("non_persistent_save_interval", None),
    ("exit_interval", None), ("exit_duration_in_mins", None),
    ("exit_signal_handler", False), ("eval_iters", 0),
    ("tensorboard_dir", None), ("wandb_project", ""), ("wandb_exp_name", ""),
    ("enable_one_logger", False), ("enable_ft_package", False),
    ("profile", False), ("use_pytorch_profiler", False),
    ("rerun_mode", "disabled"),
    ("log_straggler", False), ("num_workers", 0),
)

# Where the data comes from: all replaced by mock batches (a trace reads no data).
_DATA = (
    ("data_path", None), ("data_args_path", None), ("train_data_path", None),
    ("valid_data_path", None), ("test_data_path", None), ("per_split_data_args_path", None),
    ("per_dataset_sequences_path", None), ("data_cache_path", None), ("split", None),
    ("object_storage_cache_path", None), ("dataloader_fast_cache_load", False),
    ("dataloader_defer_npy_index_mmap", False), ("fim_data", False), ("mock_data", True),
)


def set_up(args: Any, iterations: int) -> list[str]:
    """Change validated `args` for a trace of `iterations` training iterations; returns notes."""
    notes = ["Megatron-LM run for a trace: no checkpoint load or save (nor asynchronous "
             "saving or its checkpoint worker), no evaluation, no "
             "logging services or profiler, no NaN/inf, spiky-loss or --test-mode checks (they "
             "read values a trace does not have), dataset helpers not compiled"]
    megatron_batch.check(args)
    notes.append(_cuda_graphs(args, iterations))
    notes.append(_data(args))
    for name, value in _OFF:
        if hasattr(args, name):
            setattr(args, name, value)
    _no_saving(args)
    _no_value_checks(args)
    notes += megatron_batch.set_up(args)
    _iterations(args, iterations)
    notes += _tokenizer(args) + _moe(args) + _implementation(args)  # _moe reads the impl
    return [n for n in notes if n]


# The checkpoint format, and the flag Megatron derives from it: FSDP's set-up reads them too.
_CHECKPOINT_FORMAT = ("ckpt_format", "use_dist_ckpt")


def _no_saving(args: Any) -> None:
    """Nothing is saved (--save is off), so every option about how, when or where to save or
    checkpoint is off with it, found by what it is about rather than listed: an argument named
    for saving (a `save` word) or for checkpoint files (a `ckpt` word). Its switches are turned
    off and its values unset (a conversion's format, a worker count, an interval), but for the
    checkpoint format. A Megatron-LM version's new options follow: 0.19's --async-save and
    --use-persistent-ckpt-worker start a checkpoint worker in initialize, which needs
    nvidia-resiliency-ext, although nothing is saved. Activation checkpointing is `recompute_*`
    in Megatron's words and is left as the user set it."""
    for name, value in list(vars(args).items()):
        if not set(name.split("_")) & {"save", "ckpt"} or name in _CHECKPOINT_FORMAT:
            continue
        setattr(args, name, False if isinstance(value, bool) else None)


def _no_value_checks(args: Any) -> None:
    """Megatron's checks of values (`check_*`: NaN/inf and spiky losses, large gradients, the
    weights' hashes across data-parallel replicas) read what a trace does not have, so each is
    off, found by its `check_` name rather than listed: 0.19 checks the hashes once before the
    first iteration whenever --check-weight-hash-across-dp-replicas-interval is set, and the
    fake values differ across replicas ("Parameter hashes not matching")."""
    for name, value in list(vars(args).items()):
        if name.startswith("check_"):
            setattr(args, name, False if isinstance(value, bool) else None)
    # --test-mode: attention's real-time tests gather the QK-norm weights across data-parallel
    # replicas and assert they are equal ("Discrepancy between q_w in DP ranks 0 and 1").
    if getattr(args, "test_mode", False):
        args.test_mode = False


def _data(args: Any) -> str:
    given = [name for name, off in _DATA if name != "mock_data" and
             getattr(args, name, off) not in (off, None, [], "")]
    for name, value in _DATA:
        if hasattr(args, name):
            setattr(args, name, value)
    flags = ", ".join("--" + name.replace("_", "-") for name in given)
    return ("mock batches of the configured micro-batch and sequence length instead of "
            "datasets" + (f" (replacing {flags}: a trace reads no data)" if flags else ""))


def _iterations(args: Any, iterations: int) -> None:
    """Train for the traced iterations only, keeping the learning-rate schedule's length (its
    decay and warm-up are the user's: a schedule shorter than its warm-up fails)."""
    if getattr(args, "train_samples", None):
        if hasattr(args, "lr_decay_samples") and not args.lr_decay_samples:
            args.lr_decay_samples = args.train_samples
        args.train_samples = iterations * args.global_batch_size
        return
    if hasattr(args, "lr_decay_iters") and not args.lr_decay_iters and args.train_iters:
        args.lr_decay_iters = args.train_iters
    args.train_iters = iterations


def _tokenizer(args: Any) -> list[str]:
    """Mock data needs no text: with a vocabulary size Megatron's NullTokenizer stands in for
    a tokenizer whose files may not be here."""
    kind = getattr(args, "tokenizer_type", None)
    vocab_file = getattr(args, "vocab_file", None)
    model_file = getattr(args, "tokenizer_model", None)
    if kind in WORDPIECE_VOCABULARIES and not getattr(args, "vocab_size", None):
        return [_wordpiece(args, kind, vocab_file)]
    if kind in FIXED_VOCABULARIES and not getattr(args, "vocab_size", None):
        tokens, file_arg, what = FIXED_VOCABULARIES[kind]
        file = getattr(args, file_arg, None)
        if not (file and os.path.isfile(file)):
            args.vocab_size = tokens - 1  # NullTokenizer(n) adds an end-of-document token
            args.tokenizer_type = "NullTokenizer"
            return [f"{what} {file} is not here: NullTokenizer of its {tokens} tokens instead "
                    "(mock data needs no text; --vocab-size N gives another size)"]
    if kind not in (None, "NullTokenizer") and not getattr(args, "vocab_size", None):
        files = [f for f in (vocab_file, model_file) if f]
        if not files or not all(os.path.exists(f) for f in files):  # a file or an HF folder
            # Megatron would fail reading it (or importing its library); the trace needs
            # only the vocabulary's size.
            named = " or ".join(files) or "no --vocab-file or --tokenizer-model"
            raise MemlensError(f"--tokenizer-type {kind} reads its vocabulary from a file "
                               f"({named}), which is not here: give the vocabulary's size with "
                               "--vocab-size N (a trace reads no text)")
    if kind == "NullTokenizer" or not getattr(args, "vocab_size", None):
        return []
    args.tokenizer_type = "NullTokenizer"
    if not kind:  # as if NullTokenizer had been named
        return [f"no --tokenizer-type given: NullTokenizer of --vocab-size {args.vocab_size} "
                "(mock data needs no text)"]
    args.vocab_size -= 1  # NullTokenizer(n) has n + 1 tokens; the user's tokenizer has n
    return [f"tokenizer {kind} replaced by NullTokenizer of --vocab-size {args.vocab_size + 1} "
            "tokens (mock data needs no text)"]


def _wordpiece(args: Any, kind: str, vocab_file: str | None) -> str:
    published, what, added = WORDPIECE_VOCABULARIES[kind]
    if vocab_file and os.path.isfile(vocab_file):
        with open(vocab_file, "rb") as lines:
            tokens, source = sum(1 for line in lines if line.strip()), vocab_file
    else:
        tokens, source = published, f"{what} ({vocab_file or 'no --vocab-file'} is not here)"
    args.vocab_size = tokens + added - 1  # NullTokenizer(n) adds an end-of-document token
    args.tokenizer_type = "NullTokenizer"
    extra = f" and the {added} it adds" if added else ""
    return (f"tokenizer {kind} replaced by NullTokenizer of the {tokens} tokens of "
            f"{source}{extra} (mock data needs no text)")


# Eager steps traced before Megatron's TE graphs are captured: the first, and one as every later
# eager step is (the optimizer's states made).
EAGER_STEPS = 2


def traced_iterations(args: Any, iterations: int) -> int:
    """The iterations a trace of the job runs: with TE's CUDA graphs, enough to reach the
    capture after the warm-up steps (`_cuda_graphs` shortens those) and one graphed step."""
    if _graph_impl(args) != "transformer_engine":
        return iterations
    warmup = int(getattr(args, "cuda_graph_warmup_steps", 0) or 0)
    if iterations > warmup:
        return iterations
    return max(iterations, min(warmup, max(EAGER_STEPS, iterations - 1)) + 1)


def _graph_impl(args: Any) -> str:
    return getattr(args, "cuda_graph_impl", "none") or "none"


def _cuda_graphs(args: Any, iterations: int) -> str | None:
    """Megatron's CUDA graphs. `--cuda-graph-impl transformer_engine` (TE's
    make_graphed_callables, graphed_callables.py where TE is absent) captures each layer after
    `--cuda-graph-warmup-steps` eager steps: a trace of fewer iterations than that would end
    before the graphs' pool exists, so the warm-up is cut to what the trace runs
    (`traced_iterations`). `local` (and 0.19's `full_iteration`, validate_args' reading of the
    deprecated `--enable-cuda-graph` / `--external-cuda-graph`) is refused by name: Megatron's
    CudaGraphManager checks argument types exactly, `type(arg) in {torch.Tensor, ...}`, which
    a fake tensor is not, and traced without the graphs the job would look smaller than it
    is."""
    impl = _graph_impl(args)
    if impl == "none":
        return None
    from .optimizer import _megatron_version

    if impl != "transformer_engine":
        raise MemlensError(f"{_megatron_version()}: --cuda-graph-impl {impl} captures the "
                           "layers in CUDA graphs, whose private memory pool memlens does not "
                           "model for Megatron's own graphs yet: trace without the flag (the "
                           "graphs' pool comes on top of the reserved memory reported), or "
                           "with --cuda-graph-impl transformer_engine")
    warmup = int(getattr(args, "cuda_graph_warmup_steps", 0) or 0)
    if warmup < iterations:
        return (f"--cuda-graph-impl transformer_engine: the layers are captured in CUDA graphs "
                f"after {warmup} eager step(s) (--cuda-graph-warmup-steps), then replayed: the "
                f"trace runs {iterations} iterations")
    args.cuda_graph_warmup_steps = iterations - 1
    return (f"--cuda-graph-impl transformer_engine: the layers are captured in CUDA graphs after "
            f"--cuda-graph-warmup-steps {warmup} eager steps; the trace runs {iterations - 1} "
            f"(the first, and one as each later eager step holds), the capture and one graphed "
            f"step: {iterations} iterations")


def _implementation(args: Any) -> list[str]:
    if find_spec("transformer_engine") is not None:
        return []
    if getattr(args, "fp4", None):
        # FP4 tensors are Transformer Engine's; a trace in bf16 instead would answer another
        # configuration. FP8 has stand-ins (fp8_linear.py).
        raise MemlensError(f"--fp4-format {args.fp4} needs Transformer Engine, which is not "
                           "installed here: memlens cannot trace FP4 training without it "
                           "(install transformer_engine, or trace without the flag)")
    if getattr(args, "transformer_impl", "local") != "transformer_engine":
        return []
    variant = getattr(args, "experimental_attention_variant", None)
    if variant:
        # 0.19's experimental decoder block spec (gated delta net, DSA, ...) is built from TE's
        # modules only: Megatron asserts "only supports transformer engine" with local ones.
        from .optimizer import _megatron_version

        raise MemlensError(f"{_megatron_version()}: --experimental-attention-variant {variant} "
                           "builds its layers from Transformer Engine's modules only, and "
                           "Transformer Engine is not installed here; memlens has no stand-in "
                           "for them (install transformer_engine to trace it)")
    args.transformer_impl = "local"  # the plugin notes it, with how attention is held
    return []


def _moe(args: Any) -> list[str]:
    if not getattr(args, "num_experts", None):
        return []
    notes = []  # routing is left as configured: the plugin fixes the tokens per expert
    te = find_spec("transformer_engine") is not None
    grouped = getattr(args, "moe_grouped_gemm", False) and not te
    if grouped and getattr(args, "transformer_impl", "local") == "transformer_engine":
        from .grouped_linear import NOTE

        notes.append(NOTE)
        if getattr(args, "use_transformer_engine_op_fuser", False):
            # TE's op fuser (its `ops` API) has no stand-in: the experts' unfused path keeps
            # the same tensors (its basic ops on H100s and A100s: each grouped GEMM's input,
            # the SwiGLU's input and probabilities).
            args.use_transformer_engine_op_fuser = False
            notes.append("--use-transformer-engine-op-fuser: Transformer Engine is not "
                         "installed here, so the grouped experts run TEGroupedMLP's unfused "
                         "path, which keeps the same tensors as the op fuser's basic ops")
    elif grouped and find_spec("grouped_gemm") is None:
        if "moe_act" in (getattr(args, "recompute_modules", None) or []):
            from .optimizer import _megatron_version

            raise MemlensError(
                f"{_megatron_version()}: --recompute-modules moe_act recomputes the grouped "
                "experts' activation, and grouped GEMM with --transformer-impl local needs the "
                "grouped_gemm package, which is not installed here: memlens runs the experts "
                "one after another (SequentialMLP), which Megatron does not recompute that way "
                "(install grouped_gemm, or trace without moe_act)")
        args.moe_grouped_gemm = False
        notes.append("experts run one after another (SequentialMLP): grouped GEMM with "
                     "--transformer-impl local needs grouped_gemm; the same weights and "
                     "activations")
    if getattr(args, "moe_permute_fusion", False) and not te:
        args.moe_permute_fusion = False
        notes.append("tokens permuted to their experts by Megatron's unfused path: "
                     "--moe-permute-fusion is Transformer Engine's kernel; the same permuted "
                     "tokens and probabilities (TE keeps an int32 row map for backward where "
                     "the unfused path keeps int64 token indices)")
    return notes
