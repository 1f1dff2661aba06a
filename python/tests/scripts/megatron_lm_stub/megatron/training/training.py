"""Megatron-LM's training loop, reduced to what memlens' plugin hooks, in its order: train_step
(the schedule and the optimizer step, then the model-parallel agreement and the gradient norm's
maximum), the parameters' norm with --log-params-norm, then training_log, where Megatron-LM
reads the iteration's memory."""

import torch
from megatron.core.rerun_state_machine import RerunDataIterator  # noqa: F401
from megatron.training.utils import (calc_params_l2_norm, logical_and_across_model_parallel_group,
                                     reduce_max_stat_across_model_parallel_group)


def build_train_valid_test_data_iterators(provider):
    raise RuntimeError("the stub has no datasets: memlens should have replaced this")


def train_step(step, data_iterator):
    update_successful, grad_norm = step(data_iterator)
    reduce_max_stat_across_model_parallel_group(grad_norm)
    return logical_and_across_model_parallel_group(update_successful)


def training_log(params_norm):
    return torch.cuda.memory_allocated()


def train(args, step, data_iterator, model):
    iterations = args.train_iters or args.train_samples // args.global_batch_size
    for _ in range(iterations):
        assert train_step(step, data_iterator)
        params_norm = calc_params_l2_norm(model) if args.log_params_norm else None
        training_log(params_norm)
