"""parse_args / validate_args in Megatron-LM's shape (our own code, checking what Megatron-LM's
validate_args checks for these flags): the environment gives rank and world size; validate_args
derives the data-parallel and virtual-pipeline sizes and rejects what Megatron rejects."""

import argparse
import os


def parse_args(argv):
    p = argparse.ArgumentParser()
    for name, kind, default in (
            ("--tensor-model-parallel-size", int, 1), ("--pipeline-model-parallel-size", int, 1),
            ("--context-parallel-size", int, 1), ("--num-layers", int, 2),
            ("--num-layers-per-virtual-pipeline-stage", int, None),
            ("--microbatch-group-size-per-virtual-pipeline-stage", int, None),
            ("--hidden-size", int, 128), ("--num-attention-heads", int, 4),
            ("--seq-length", int, 64), ("--micro-batch-size", int, 1),
            ("--global-batch-size", int, 64), ("--train-iters", int, None),
            ("--lr-decay-iters", int, None), ("--lr-warmup-iters", int, 0),
            ("--lr-warmup-fraction", float, None), ("--train-samples", int, None),
            ("--lr-decay-samples", int, None),
            ("--vocab-size", int, None), ("--tokenizer-type", str, "GPT2BPETokenizer"),
            ("--transformer-impl", str, "transformer_engine"), ("--load", str, None),
            ("--save", str, None), ("--save-interval", int, None), ("--eval-iters", int, 100),
            ("--tensorboard-dir", str, None), ("--num-workers", int, 2),
            ("--data-args-path", str, None), ("--per-split-data-args-path", str, None),
            ("--data-cache-path", str, None), ("--split", str, None),
            ("--num-experts", int, None), ("--tp-comm-overlap-cfg", str, None)):
        p.add_argument(name, type=kind, default=default)
    for name in ("--data-path", "--train-data-path", "--valid-data-path", "--test-data-path"):
        p.add_argument(name, nargs="*", default=None)
    p.add_argument("--rampup-batch-size", nargs="*", default=None)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--mock-data", action="store_true")
    p.add_argument("--moe-grouped-gemm", action="store_true")
    p.add_argument("--disable-bias-linear", action="store_true")
    p.add_argument("--deterministic-mode", action="store_true")
    p.add_argument("--check-for-nan-in-loss-and-grad", action="store_true", default=True)
    p.add_argument("--create-attention-mask-in-dataloader", action="store_true", default=True)
    p.add_argument("--log-params-norm", action="store_true")
    p.add_argument("--use-megatron-fsdp", action="store_true")
    p.add_argument("--data-parallel-sharding-strategy", default="no_shard")
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--tp-comm-overlap", action="store_true")
    args = p.parse_args(argv)
    args.rank = int(os.getenv("RANK", "0"))
    args.world_size = int(os.getenv("WORLD_SIZE", "1"))
    return args


def validate_args(args, defaults={}):
    model = args.tensor_model_parallel_size * args.pipeline_model_parallel_size * \
        args.context_parallel_size
    assert args.world_size % model == 0
    args.data_parallel_size = args.world_size // model
    args.virtual_pipeline_model_parallel_size = None
    if args.num_layers_per_virtual_pipeline_stage:
        per_stage = args.num_layers // args.pipeline_model_parallel_size
        chunks = per_stage // args.num_layers_per_virtual_pipeline_stage
        args.virtual_pipeline_model_parallel_size = chunks if chunks > 1 else None
    args.microbatch_group_size_per_vp_stage = \
        args.microbatch_group_size_per_virtual_pipeline_stage
    sources = [bool(args.mock_data), bool(args.data_path),
               any([args.train_data_path, args.valid_data_path, args.test_data_path])]
    assert sum(sources) <= 1, "only one of mock data, --data-path and per-split paths"
    if args.train_iters:
        assert args.train_samples is None, "iterations or samples, not both"
        assert args.rampup_batch_size is None, "no batch ramp-up with --train-iters"
    if args.tensor_model_parallel_size > 1:
        assert os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", \
            "tensor parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1"
    if args.deterministic_mode:
        assert os.environ.get("NCCL_ALGO") in ("Ring", "Tree"), \
            "--deterministic-mode needs NCCL_ALGO set"
    if args.tp_comm_overlap:
        assert args.sequence_parallel, "Tensor parallel communication/GEMM overlap can happen " \
            "only when sequence parallelism is enabled"
    args.fp8 = None
    args.padded_vocab_size = args.vocab_size or 1024
    return args
