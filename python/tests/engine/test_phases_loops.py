"""Training loops with no `optimizer.step()` to count by (hand-written SGD, evaluation), gradient
accumulation, a script that ends before the requested iterations, and Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from support.paths import REPO, TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPTS = TESTS / "scripts"


def run_json(memlens, script: str, *args: str, iterations: int = 2):
    out = memlens("run", "--device", "cpu", "--json", "--no-snapshot", "--iterations",
                  str(iterations), "--", str(SCRIPTS / script), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), out.stderr


def phase_names(data) -> list[str]:
    return [p["name"] for p in data["phases"] if p["device"] == "cpu"]


def lstm_parameters(ntokens=100, emsize=16, nhid=32, nlayers=2) -> int:
    """Embedding, the LSTM's layers (4 gates: weights over input and hidden, two biases),
    the decoder."""
    lstm = sum(4 * nhid * ((emsize if layer == 0 else nhid) + nhid) + 2 * 4 * nhid
               for layer in range(nlayers))
    return ntokens * emsize + lstm + nhid * ntokens + ntokens


@pytest.mark.parametrize("update", ["add_", "isub"])
def test_handwritten_sgd_counts_backward_passes(memlens, update):
    data, stderr = run_json(memlens, "handwritten_sgd_rnn.py", "--update", update)
    assert data["iterations_traced"] == 2
    assert data["iteration_unit"] == "backward passes"
    assert phase_names(data) == ["setup_model_and_optimizer", "forward_backward_iter_0",
                                 "update_iter_0", "forward_backward_iter_1", "update_iter_1"]
    # 19,748 fp32 parameters (1,600 + 6,400 + 8,448 + 3,300), a gradient of each.
    assert lstm_parameters() == 19_748
    assert data["category_peaks"]["parameter"] == 19_748 * 4
    assert data["category_peaks"]["gradient"] == 19_748 * 4
    assert data["category_peaks"]["optimizer_state"] == 0
    # Stopped at the third forward: both updates ran (the script counts its steps after them).
    assert [ln for ln in stderr.splitlines() if ln.startswith("step ")] == ["step 1", "step 2"]
    assert "2 iterations (backward passes)" in stderr


def test_gradient_accumulation_is_one_iteration_per_optimizer_step(memlens):
    data, stderr = run_json(memlens, "grad_accumulation.py", "--accumulation-steps", "4")
    assert data["iteration_unit"] == "optimizer steps"
    assert phase_names(data) == ["setup_model_and_optimizer", "forward_backward_iter_0",
                                 "optimizer_step_iter_0", "forward_backward_iter_1",
                                 "optimizer_step_iter_1"]
    # Two steps of four micro-batches each, and not one micro-batch of a third step.
    micro = [ln for ln in stderr.splitlines() if ln.startswith("micro-batch ")]
    assert micro == [f"micro-batch {i}" for i in range(1, 9)]
    params = (64 * 128 + 128) + (128 * 64 + 64)  # 16,576
    assert data["category_peaks"]["parameter"] == params * 4
    assert data["category_peaks"]["gradient"] == params * 4
    # AdamW: exp_avg and exp_avg_sq per parameter, a 4-byte step count per tensor (4 tensors).
    assert data["category_peaks"]["optimizer_state"] == 2 * params * 4 + 4 * 4


@pytest.mark.parametrize("grad_mode", [[], ["--no-grad"]])
def test_evaluation_loop_counts_forward_passes_of_the_model(memlens, grad_mode):
    data, stderr = run_json(memlens, "eval_only.py", *grad_mode, iterations=3)
    assert data["iterations_traced"] == 3
    assert data["iteration_unit"] == "forward passes"
    # The loss module called next to the model begins no iteration of its own.
    assert phase_names(data) == ["setup_model_and_optimizer", "forward_iter_0",
                                 "forward_iter_1", "forward_iter_2"]
    assert [ln for ln in stderr.splitlines() if ln.startswith("batch ")] == \
        ["batch 1", "batch 2", "batch 3"]
    params = (48 * 96 + 96) + (96 * 96 + 96) + (96 * 10 + 10)  # 14,986
    assert data["category_peaks"]["parameter"] == params * 4
    assert data["category_peaks"]["gradient"] == 0


def test_header_says_the_iterations_traced_when_the_script_ends_first(memlens):
    data, stderr = run_json(memlens, "eval_only.py", "--batches", "1", iterations=2)
    assert data["iterations"] == 2 and data["iterations_traced"] == 1
    assert phase_names(data) == ["setup_model_and_optimizer", "forward_iter_0"]
    header = stderr[stderr.index("memlens script"):].split("\n\n")[0].replace("\n", " ")
    assert "1 iteration (forward passes; the script ended; 2 requested)" in header


def test_ctrl_c_ends_the_trace_with_the_report_of_what_was_traced():
    """SIGINT once the second iteration's optimizer step is reached: the script then spins in
    Python code with no op to stop at, and catches KeyboardInterrupt; the trace still ends
    promptly, with the two iterations traced, and exits 130."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memlens", "run", "--device", "cpu", "--json", "--progress",
         "json", "--no-snapshot", "--iterations", "1000", "--",
         str(SCRIPTS / "interruptible.py"), "--busy-after", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.time() + 300
        while time.time() < deadline:
            line = proc.stderr.readline()
            assert line, "memlens ended before the second step: " + "".join(lines)[-3000:]
            lines.append(line)
            if line.startswith("{") and json.loads(line).get("phase") == "optimizer_step_iter_1":
                break
        time.sleep(0.5)  # into the busy loop after the step
        sent = time.time()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.time() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert took < 20, took
    data = json.loads(stdout)
    assert data["interrupted"] is True
    assert data["iterations_traced"] == 2
    assert [p["name"] for p in data["phases"]][-1] == "optimizer_step_iter_1"
    params = (128 * 256 + 256) + (256 * 128 + 128)  # 65,920
    assert data["category_peaks"]["parameter"] == params * 4
    assert "2 iterations (optimizer steps; interrupted; 1000 requested)" in \
        stderr.replace("\n", " ")
    assert "caught KeyboardInterrupt" not in stdout + stderr


def test_ctrl_c_while_memlens_books_an_op_stops_the_script_at_its_next_op():
    """SIGINT arriving inside memlens' own bookkeeping (here: the phase tracker starting
    iteration 1) is not raised there, half-way through an update of the ledger: the next op
    of the script stops it, and the trace ends as interrupted."""
    import torch

    from memlens import Tracer
    from memlens.engine.interrupt import stop_on_interrupt

    ops_after = []
    with Tracer("cpu", iterations=1000) as tracer:
        def on_phase(name):
            if name == "forward_backward_iter_1":
                os.kill(os.getpid(), signal.SIGINT)  # handled right here, in phases.py
                ops_after.append(name)  # the handler did not raise: bookkeeping went on
        tracer.phases.on_phase = on_phase
        with stop_on_interrupt(tracer):
            model = torch.nn.Linear(16, 16)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(1000):
                model(torch.randn(4, 16)).sum().backward()
                opt.step()
                opt.zero_grad()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert ops_after == ["forward_backward_iter_1"]
    assert tracer.interrupted and tracer.phases.iterations_traced == 2
    snap = tracer.snapshot()
    assert snap["meta"]["interrupted"] is True
    assert [p["name"] for p in snap["phases"]][-1] == "forward_backward_iter_1"
    assert snap["summary"]["category_peaks"]["parameter"] == (16 * 16 + 16) * 4


def test_handwritten_update_makes_temporaries_and_the_next_batch_is_input(memlens):
    data, _ = run_json(memlens, "handwritten_sgd_mlp.py")
    assert data["peak_phase"] == "update_iter_0"
    at_peak = data["categories_at_peak"]
    # `p -= lr * p.grad` of the 1024×256 fp32 weight: a 1 MiB temporary, plus the loss's scalars.
    assert 1024 * 256 * 4 <= at_peak["temporary"] < 1024 * 256 * 4 + 64
    # The batch (x and y, 64×256 fp32 each) is the only input at the peak.
    assert at_peak["input"] == 2 * 64 * 256 * 4
    # Inputs' own peak: the next step's x is made while the last x and y are alive, then its y
    # while the last y is (the names rebind one at a time): three batches' tensors.
    assert data["category_peaks"]["input"] == 3 * 64 * 256 * 4
