"""A library's CUDA extension built on first use (torch.utils.cpp_extension.load/load_inline):
refused in a trace with a message naming the extension, the library and the call, also as a
note of the trace (cuda/extension_builds.py); a library that falls back to PyTorch ops then
traces on. C++-only builds go through.

One trace of scripts/platform/jit_extension.py (an MLP whose bias-GeLU comes from a library
beside it, fused_kernels/, that JIT-builds a CUDA kernel) on a simulated H100."""

import re
import subprocess
import sys

import pytest
import torch.utils.cpp_extension as cpp_extension

from memlens.cuda import extension_builds
from memlens.errors import MemlensError
from memlens.patches.patcher import Patcher
from support.paths import TESTS
from support.runs import run_script_on_h100

SCRIPT = TESTS / "scripts" / "platform" / "jit_extension.py"
REFUSAL = ("fused_kernels builds the CUDA extension 'fused_bias_gelu' on first use "
           "(torch.utils.cpp_extension.load_inline): a trace runs no CUDA kernel")
F32 = 4
WIDTH = 1024


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return run_script_on_h100(tmp_path_factory.mktemp("jit"), SCRIPT, "jit")


@pytest.mark.slow  # traces in a fresh process
def test_the_build_is_refused_by_name_and_the_library_falls_back(traced):
    printed, snap = traced
    build = re.findall(r"^BUILD (\w+): (.*)$", printed, re.M)
    assert len(build) == 1 and build[0][0] == "MemlensError", build
    assert build[0][1].startswith(REFUSAL)
    assert [n for n in snap["meta"]["notes"] if n.startswith(REFUSAL)] == [build[0][1]]


@pytest.mark.slow  # traces in a fresh process
def test_the_fallback_is_what_is_traced(traced):
    _, snap = traced
    # up (1024 -> 4096, no bias), the GeLU's bias (4096), down (4096 -> 1024 with bias), fp32
    params = (WIDTH * 4 * WIDTH + 4 * WIDTH + 4 * WIDTH * WIDTH + WIDTH) * F32
    assert params == 33_574_912
    peaks = snap["summary"]["category_peaks"]
    assert (peaks["parameter"], peaks["gradient"], peaks["optimizer_state"]) == \
        (params, params, 2 * params)
    # two batches of 8 x 256 x 1024 fp32: the second is made while `x` still holds the first
    assert peaks["input"] == 2 * 8 * 256 * WIDTH * F32


def test_only_builds_with_cuda_are_refused(monkeypatch):
    built: list[str] = []
    monkeypatch.setattr(cpp_extension, "load",
                        lambda name, sources, *a, **k: built.append(name) or name)
    monkeypatch.setattr(cpp_extension, "load_inline",
                        lambda name, cpp, cuda_sources=None, *a, **k: built.append(name) or name)
    notes: list[str] = []
    patcher = Patcher()
    extension_builds.apply(patcher, notes.append)
    try:
        assert cpp_extension.load("cpu_ops", ["ops.cpp"]) == "cpu_ops"
        assert cpp_extension.load_inline("cpu_inline", "int f();") == "cpu_inline"
        for call, build in [
            ("load", lambda: cpp_extension.load("gpu_ops", ["ops.cpp", "kernels.cu"])),
            ("load", lambda: cpp_extension.load("headers", "ops.cpp", with_cuda=True)),
            ("load_inline", lambda: cpp_extension.load_inline("k", "", cuda_sources="__global__")),
        ]:
            with pytest.raises(MemlensError, match=rf"builds the CUDA extension '\w+' on first "
                                                   rf"use \(torch\.utils\.cpp_extension\.{call}\)"):
                build()
    finally:
        patcher.undo()
    assert built == ["cpu_ops", "cpu_inline"]
    assert len(notes) == 3


@pytest.mark.slow  # a fresh interpreter: what a trace imports
def test_a_trace_that_builds_nothing_does_not_import_the_builder():
    # torch.utils.cpp_extension imports setuptools (about 0.1 s of every trace); the refusal is
    # applied when the script imports it
    code = ("import sys\n"
            "from memlens.cuda.build import ensure_fake_cuda_support\n"
            "ensure_fake_cuda_support()\n"
            "import torch\n"
            "from memlens import Tracer\n"
            "with Tracer('h100-80gb'):\n"
            "    torch.ones(4, device='cuda')\n"
            "print(sorted({'torch.utils.cpp_extension', 'setuptools'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=TESTS.parent, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[]"
