"""Host-side work computes for real, values read from device tensors get placeholders, and sizes
that depend on values are bounded (host_compute.py, accountant.py, dynamic_sizes.py)."""

import json
import os
import subprocess
import sys

import pytest

from support.paths import REPO, TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

VALUES = TESTS / "scripts" / "values"
MiB = 1024 * 1024


def _trace(script: str, *args: str, flags=()) -> dict:
    out = run_memlens("run", *flags, "--json", "--no-snapshot", "--", str(VALUES / script), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _round512(n: int) -> int:
    return -(-n // 512) * 512


# Linear(64, 128) and Linear(128, 10), fp32, each tensor in its own 512-byte CUDA block.
_LOADER_PARAMS = sum(_round512(4 * n) for n in (64 * 128, 128, 128 * 10, 10))


@pytest.mark.parametrize("args", [
    [],                                   # shuffled, in-process
    ["--workers", "2", "--pin"],          # worker processes and the pinning thread
    ["--iterable", "--workers", "2"],     # an IterableDataset sharded by get_worker_info()
])
def test_a_data_loader_runs_for_real_and_feeds_the_device(args):
    data = _trace("host_data_loader.py", *args)
    names = [p["name"] for p in data["phases"] if p["device"] == "cuda:0"]
    assert names == ["setup_model_and_optimizer", "forward_backward_iter_0",
                     "optimizer_step_iter_0", "forward_backward_iter_1", "optimizer_step_iter_1"]
    at_peak = data["categories_at_peak"]
    assert at_peak["parameter"] == _LOADER_PARAMS == 38912
    assert at_peak["optimizer_state"] == 2 * _LOADER_PARAMS  # AdamW's exp_avg, exp_avg_sq
    # One batch on the device: x (32 x 64 fp32, 8 KiB) and y (32 int64, one 512 B block).
    assert at_peak["input"] == 32 * 64 * 4 + 512
    # The accuracy counter and the logged loss read device values: one note per line.
    assert [(p["line"], p["value"]) for p in data["placeholders"]] == [(86, 0), (89, 0.0)]


def test_a_distributed_sampler_takes_the_simulated_rank():
    data = _trace("host_data_loader.py", "--distributed", "--workers", "2",
                  flags=("--world-size", "2", "--rank", "1"))
    assert data["rank"] == 1 and data["world_size"] == 2
    assert data["categories_at_peak"]["input"] == 32 * 64 * 4 + 512
    assert [p["name"] for p in data["phases"] if p["device"] == data["device_key"]][-1] == \
        "optimizer_step_iter_1"


def test_every_way_of_reading_a_device_value_answers_a_placeholder_once_per_line():
    data = _trace("device_values.py")
    # line: what it reads (device_values.py)
    assert [(p["line"], p["op"], p["value"]) for p in data["placeholders"]] == [
        (18, "item", False),  # if torch.isnan(loss)
        (21, "item", 0.0),    # f"{loss:.4f}" and float(loss)
        (22, "item", 0.0),    # "%.3f" % (accuracy, norm)
        (23, "item", 0),      # int(logits[0].argmax())
        (24, "item", 0.0),    # logits[0].tolist()
        (25, "item", True),   # bool(torch.isfinite(loss)): a healthy run's answer
        (26, "item", True),   # not torch.isfinite(loss).all() or torch.isnan(norm).any()
        # Under inference_mode composite ops come to the modes whole: `.to("cuda")` of a
        # host tensor is a fake copy, not one FakeTensorMode folds for real ("Could not run
        # aten::empty_strided with arguments from the CUDA backend"), and `float()` is a read.
        (30, "item", 0.0),    # float(held.sum() + logits.sum())
        (33, "item", True),   # torch._check_tensor_all_with(ValueError, y < 8): it holds
    ]
    # Four steps were asked, two are traced: the second has SGD's momentum buffers.
    assert data["phases"][-1]["name"] == "optimizer_step_iter_1"
    params = sum(_round512(4 * n) for n in (256 * 256, 256, 256 * 8, 8))
    assert data["modules"][0]["parameter_bytes"] == params


@pytest.mark.parametrize("policy,kept", [(None, 1024 * 1024), ("0.25", 256 * 1024)])
def test_a_masked_result_is_sized_by_the_policy(policy, kept):
    flags = ("--dynamic-sizes", policy) if policy else ()
    data = _trace("bounded_sizes.py", flags=flags)
    # x (4 MiB) + mask (1 MiB bool) + x[mask]'s index tensor (kept x 2 dims x 8 B, alive while
    # it indexes) + the kept floats (kept x 4 B).
    assert data["peak_bytes"] == 4 * MiB + 1 * MiB + kept * 2 * 8 + kept * 4
    [note] = data["placeholders"]
    assert (note["line"], note["op"]) == (7, "size of index")
    assert note["value"] == f"{kept} of at most {1024 * 1024}"


def test_the_error_policy_stops_at_a_bounded_size():
    out = run_memlens("run", "--dynamic-sizes", "error", "--no-snapshot", "--",
                      str(VALUES / "bounded_sizes.py"))
    assert out.returncode == 1
    assert "bounded_sizes.py:7: `index` needs real tensor values" in out.stderr
    assert "--dynamic-sizes error was given" in out.stderr


def test_a_policy_that_is_no_fraction_is_refused():
    out = run_memlens("run", "--dynamic-sizes", "2", "--no-snapshot", "--",
                      str(VALUES / "bounded_sizes.py"))
    assert out.returncode == 2
    assert "'2' is not a fraction in (0, 1]" in out.stderr


def test_module_state_is_fake_in_any_kind_of_init():
    data = _trace("module_kinds.py")  # the script asserts which tensors are fake
    # The three 4 MiB weights were made and dropped on the CPU; on the device one 1 MiB tensor
    # is alive at a time.
    assert data["device_key"] == "cuda:0" and data["peak_bytes"] == 1024 * 1024


def test_a_model_built_on_the_cpu_allocates_nothing_real():
    # The trace runs as the only child of a fresh interpreter, whose RUSAGE_CHILDREN is then
    # that trace's peak resident memory.
    probe = ("import resource, subprocess, sys\n"
             "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "assert done.returncode == 0, done.stderr[-3000:]\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
             "print(done.stdout)\n")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "memlens", "run",
                          "--json", "--no-snapshot", "--", str(VALUES / "cpu_built_model.py")],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    assert out.returncode == 0, out.stderr[-3000:]
    rss_text, summary = out.stdout.split("\n", 1)
    data = json.loads(summary)
    assert data["modules"][0]["parameter_bytes"] == 8 * 8192 * 8192 * 4  # 2 GiB, on the device
    # The process never held the 2 GiB it built on the CPU (torch itself takes ~300 MiB).
    assert int(rss_text) < 1024 * MiB
