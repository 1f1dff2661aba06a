"""Megatron-LM's training loop, reduced to what memlens' plugin hooks."""

from megatron.core.rerun_state_machine import RerunDataIterator  # noqa: F401
from megatron.training.utils import logical_and_across_model_parallel_group


def build_train_valid_test_data_iterators(provider):
    raise RuntimeError("the stub has no datasets: memlens should have replaced this")


def train(args, step, data_iterator):
    iterations = args.train_iters or args.train_samples // args.global_batch_size
    for _ in range(iterations):
        update_successful = step(data_iterator)
        assert logical_and_across_model_parallel_group(update_successful)
