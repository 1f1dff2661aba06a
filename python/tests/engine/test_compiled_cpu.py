"""torch.compile on the CPU target: a compiled training step traced under `memlens run --device
cpu` peaks where the same step, compiled for real by Inductor's CPU backend and run, peaks as
the CPU allocator records it (torch.profiler memory events, support/measure_cpu.py).

Real compilation builds each kernel with the C++ compiler: the models are tiny, and Inductor's
cache (/tmp/torchinductor_*) makes a second run of a case fast."""

import json

import pytest

from support.paths import TESTS
from support.runs import assert_phases_match, real_and_traced_on_cpu

pytestmark = pytest.mark.slow  # traces (and real compilations) in fresh processes

CASE = str(TESTS / "cases" / "compiled_case.py")
TOLERANCE = 0.01  # the bound; the cases below are exact to the byte today

CASES = {
    # name: (arguments, graphs and breaks per region, in the order the regions first ran)
    "mlp": (["--model", "mlp"], [(1, 0)]),
    "mlp-graph-break": (["--model", "mlp-graph-break"], [(2, 1)]),
    "gpt-block": (["--model", "gpt"], [(1, 0)]),
    "gpt-block-activation-checkpointing": (["--model", "gpt-checkpoint"], [(1, 0)]),
    "llama-block": (["--model", "llama"], [(1, 0)]),
    "convnet": (["--model", "convnet"], [(1, 0)]),
    # torch.compile(opt.step): Dynamo breaks at the step's pre and post hooks (memlens' own and
    # the measurement's), and runs `_init_group` for real while compiling: AdamW's state.
    "mlp-compiled-adamw-step": (["--model", "mlp", "--compile-step"], [(1, 0), (1, 2)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_step_matches_the_allocator(name):
    args, graphs = CASES[name]
    real, est = real_and_traced_on_cpu(CASE, args)

    assert_phases_match(real, est, TOLERANCE)
    regions = est["compiled_regions"]
    assert [(r["graphs"], r["graph_breaks"]) for r in regions] == graphs
    assert all(r["compiled_as"] == "inductor" for r in regions)
    assert not any("traced eagerly" in n for n in est["notes"])


def test_partitioner_saves_less_than_eager_and_checkpointing_less_still(memlens):
    """The same GPT traced with and without activation checkpointing: Inductor's min-cut
    partitioner saves less than eager autograd would (it recomputes cheap pointwise values), and
    with checkpointing it saves only each block's input, the rest being recomputed."""
    saved = {}
    for model in ("gpt", "gpt-checkpoint"):
        out = memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--", CASE,
                      "--model", model)
        assert out.returncode == 0, out.stderr[-3000:]
        region, = json.loads(out.stdout)["compiled_regions"]
        saved[model] = region["saved_bytes"], region["eager_saved_bytes"]
    assert 0 < saved["gpt"][0] < saved["gpt"][1]
    # Checkpointed: the second block's input (4 x 32 x 64 fp32 = 32 KiB; the first block's is
    # the region's own input), and what the final LayerNorm and head keep, a little more.
    assert 4 * 32 * 64 * 4 < saved["gpt-checkpoint"][0] < saved["gpt"][0] / 10


def test_a_backend_memlens_does_not_model_runs_eagerly_with_a_note(memlens, tmp_path):
    snap = tmp_path / "s.json"
    out = memlens("run", "--device", "cpu", "--json", "--snapshot", str(snap), "--", CASE,
                  "--model", "mlp", "--backend", "aot_eager")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    eager = memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--", CASE,
                    "--model", "mlp", "--how", "eager")
    assert eager.returncode == 0, eager.stderr[-3000:]
    # Eager, to the byte, and said so.
    assert data["peak_bytes"] == json.loads(eager.stdout)["peak_bytes"]
    region, = data["compiled_regions"]
    assert region["compiled_as"] == "eager" and region["graphs"] == 0
    assert region["call"] == "torch.compile(MLP, backend='aot_eager')"
    assert "not 'aot_eager'" in region["eager_because"]
    assert data["notes"] == [f"{region['place']}: {region['call']} was traced eagerly "
                             f"({region['eager_because']}); compiled memory is usually lower, "
                             "as fused kernels keep fewer intermediate tensors"]

    from memlens.snapshot import validate_snapshot

    document = json.loads(snap.read_text())
    validate_snapshot(document)
    assert document["meta"]["compiled_regions"] == data["compiled_regions"]


def test_lines_inside_a_compiled_region_are_the_callers(memlens, tmp_path):
    """Buffers of the compiled program are made by Inductor's generated wrapper code: they are
    attributed to the user's line that called the region, never to the generated file."""
    snap = tmp_path / "s.json"
    out = memlens("run", "--device", "cpu", "--snapshot", str(snap), "--", CASE,
                  "--model", "mlp")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = json.loads(snap.read_text())["lines"]
    assert lines and not any("torchinductor" in ln["file"] for ln in lines)
    assert any(ln["file"] == CASE and ln["bytes_at_peak"] for ln in lines)


def test_code_compiled_in_a_trace_is_compiled_again_after_it():
    """The trace's compiled code has no-op kernels: after the trace (the Python API runs in the
    user's process) the same function compiled for real computes real values."""
    from support.runs import run_python

    result = run_python("""
        import torch
        from memlens import Tracer

        def scaled_gelu(x):
            return torch.nn.functional.gelu(x) * 3.0

        with Tracer("cpu"):
            torch.compile(scaled_gelu)(torch.ones(8, 8))
        x = torch.linspace(-2, 2, 64).view(8, 8)
        result = torch.allclose(torch.compile(scaled_gelu)(x), scaled_gelu(x))
    """)
    assert result is True
