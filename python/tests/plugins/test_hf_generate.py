"""`generate` in a trace (scripts/hf/generate_then_train.py: sampled completions, then a training
step on them, as RL fine-tuning loops do): EOS cannot be seen among made-up sampled tokens, and
the loop's stop test read a made-up value, so the trace never ended. Each call now runs to its
length limit (plugins/hf/transformers.py), the most a real call can take."""

import pytest

from support.paths import TESTS
from support.ranks import allocations_of
from support.runs import run_script_on_h100

pytestmark = pytest.mark.slow  # traces in a fresh process


def test_generate_runs_to_its_length_limit_and_the_step_trains_on_it(tmp_path):
    output, snap = run_script_on_h100(tmp_path, TESTS / "scripts" / "hf" /
                                      "generate_then_train.py", "generate")
    # 16 prompt tokens and 24 sampled ones, in both steps.
    assert output.count("generated (4, 40)") == 2
    assert any(n.startswith("generate: EOS and stop strings were taken as never sampled")
               for n in snap["meta"]["notes"])
    # The training step's logits over the 40 tokens: 4 x 40 x 1,000 fp32.
    assert allocations_of(snap, 4 * 40 * 1000 * 4, phase="forward_backward_iter_1") >= 1
