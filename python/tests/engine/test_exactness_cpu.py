"""The CPU target is exact: a training step traced under `memlens run --device cpu` peaks where
the same step run for real peaks, as the CPU allocator itself records it (torch.profiler memory
events, measured in a separate process by support/measure_cpu.py)."""

import pytest

from support.paths import TESTS
from support.runs import assert_phases_match, real_and_traced_on_cpu

pytestmark = pytest.mark.slow  # traces in fresh processes

CASE = str(TESTS / "cases" / "train_case.py")
TOLERANCE = 0.001  # 0.1 %

CASES = {
    "mlp-fp32-adamw": ["--model", "mlp"],
    "mlp-bf16-sgd": ["--model", "mlp", "--dtype", "bf16", "--optimizer", "sgd"],
    "gpt-dropout-fp32-adamw": ["--model", "gpt"],
    "gpt-activation-checkpointing": ["--model", "gpt-checkpoint"],
    "hf-gpt2-fp32-adamw": ["--model", "gpt2"],
    "hf-llama-bf16-adamw": ["--model", "llama", "--dtype", "bf16"],
    "hf-mixtral-moe-fp32-sgd": ["--model", "mixtral", "--optimizer", "sgd"],
    "hf-bert-encoder-fp32-adamw": ["--model", "bert"],
    "convnet-fp32-sgd": ["--model", "convnet", "--optimizer", "sgd"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_estimate_matches_the_allocator(name):
    args = CASES[name]
    real, est = real_and_traced_on_cpu(CASE, args)

    assert_phases_match(real, est, TOLERANCE)
