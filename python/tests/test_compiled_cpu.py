"""torch.compile on the CPU target: a compiled training step traced under `memlens run --device
cpu` peaks where the same step, compiled for real by Inductor's CPU backend and run, peaks as
the CPU allocator records it (torch.profiler memory events, support/measure_cpu.py).

Real compilation builds each kernel with the C++ compiler: the models are tiny, and Inductor's
cache (/tmp/torchinductor_*) makes a second run of a case fast."""

import json

import pytest

from conftest import TESTS, real_and_traced_on_cpu

CASE = str(TESTS / "cases" / "compiled_case.py")
TOLERANCE = 0.01  # the bound; the cases below are exact to the byte today

CASES = {
    "mlp": ["--model", "mlp"],
    "gpt-block": ["--model", "gpt"],
    "gpt-block-activation-checkpointing": ["--model", "gpt-checkpoint"],
    "llama-block": ["--model", "llama"],
    "convnet": ["--model", "convnet"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_step_matches_the_allocator(name):
    real, est = real_and_traced_on_cpu(CASE, CASES[name])

    assert [p["name"] for p in est["phases"]] == [p["name"] for p in real["phases"]]
    assert est["peak_bytes"] == pytest.approx(real["peak_bytes"], rel=TOLERANCE)
    for e, r in zip(est["phases"], real["phases"]):
        assert e["peak_bytes"] == pytest.approx(r["peak_bytes"], rel=TOLERANCE), e["name"]
        assert e["current_before_bytes"] == pytest.approx(r["current_before_bytes"],
                                                          rel=TOLERANCE), e["name"]
    region, = est["compiled_regions"]
    assert region["compiled_as"] == "inductor" and region["graphs"] == 1
    assert region["graph_breaks"] == 0
    assert not any("traced eagerly" in n for n in est["notes"])
