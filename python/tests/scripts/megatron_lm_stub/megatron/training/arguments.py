"""parse_args / validate_args as Megatron-LM's: the environment gives rank and world size;
validate_args derives the data-parallel size and checks the batch."""

import argparse
import os


def parse_args(argv):
    p = argparse.ArgumentParser()
    for name, kind, default in (
            ("--tensor-model-parallel-size", int, 1), ("--pipeline-model-parallel-size", int, 1),
            ("--context-parallel-size", int, 1), ("--num-layers", int, 2),
            ("--hidden-size", int, 128), ("--num-attention-heads", int, 4),
            ("--seq-length", int, 64), ("--micro-batch-size", int, 1),
            ("--global-batch-size", int, 64), ("--train-iters", int, 1000),
            ("--lr-decay-iters", int, None), ("--lr-warmup-iters", int, 0),
            ("--lr-warmup-fraction", float, None), ("--train-samples", int, None),
            ("--vocab-size", int, None), ("--tokenizer-type", str, "GPT2BPETokenizer"),
            ("--transformer-impl", str, "transformer_engine"), ("--load", str, None),
            ("--save", str, None), ("--save-interval", int, None), ("--eval-iters", int, 100),
            ("--tensorboard-dir", str, None), ("--num-workers", int, 2)):
        p.add_argument(name, type=kind, default=default)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--check-for-nan-in-loss-and-grad", action="store_true", default=True)
    p.add_argument("--create-attention-mask-in-dataloader", action="store_true", default=True)
    args = p.parse_args(argv)
    args.rank = int(os.getenv("RANK", "0"))
    args.world_size = int(os.getenv("WORLD_SIZE", "1"))
    return args


def validate_args(args, defaults={}):
    model = args.tensor_model_parallel_size * args.pipeline_model_parallel_size * \
        args.context_parallel_size
    assert args.world_size % model == 0
    args.data_parallel_size = args.world_size // model
    assert args.global_batch_size % (args.micro_batch_size * args.data_parallel_size) == 0
    args.padded_vocab_size = args.vocab_size or 1024
    return args
