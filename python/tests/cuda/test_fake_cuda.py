"""Fake CUDA (memlens.cuda): shim build/cache, training on fake cuda, simulated torch.cuda.

Every scenario runs in a fresh interpreter: the shim must load before `import torch`, and a
C++ abort in one must not take pytest down.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlens.cuda.build import _driver_gpu_count, find_torch

PYTHON_DIR = Path(__file__).resolve().parents[2]
CUDA_BUILD = find_torch().cuda_build
# Everything here is about machines without a GPU (with one, memlens loads no shim).
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CUDA_BUILD and _driver_gpu_count() > 0,
                                reason="a GPU is visible; these tests cover GPU-less machines")]
# `make test` installs g++ (scripts/setup-system.sh) and sets MEMLENS_STRICT_TESTS: there a
# missing compiler fails these tests instead of skipping them.
needs_compiler = pytest.mark.skipif(
    not os.environ.get("MEMLENS_STRICT_TESTS") and not (os.environ.get("CXX") or shutil.which("g++")),
    reason="no C++ compiler to build the shim")

PRELUDE = """
import json, sys
from memlens.cuda.build import ensure_fake_cuda_support
SHIM = ensure_fake_cuda_support(device_count=4)
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from memlens.cuda.simulate import simulate_cuda
from memlens.cuda.spec_types import DeviceSpec

H100 = DeviceSpec("h100-80gb", "NVIDIA H100 80GB HBM3", 81559 * 2**20, 9, 0, 132)

class Stub:
    def __init__(self):
        self.resets = []
    def allocated(self, i): return 1000 + i
    def max_allocated(self, i): return 2000 + i
    def reset_peak(self, i): self.resets.append(i)
    def reserved(self, i): return 3 * 2**20 + i
    def max_reserved(self, i): return 4 * 2**20 + i
    def empty_cache(self, i): self.emptied = getattr(self, "emptied", []) + [i]

def emit(**kw):
    print("RESULT " + json.dumps(kw, default=str))
"""


EXIT = "\nimport os as _os, sys as _sys\n_sys.stdout.flush(); _sys.stderr.flush(); _os._exit(0)\n"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("memlens-cache")


def run_py(code: str, *, cache: Path, prelude: bool = True, env: dict | None = None,
           timeout: int = 600) -> tuple[subprocess.CompletedProcess, dict]:
    full_env = {**os.environ, "MEMLENS_CACHE_DIR": str(cache), **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PYTHON_DIR), full_env.get("PYTHONPATH", "")) if p)
    # Leave with os._exit, as the memlens CLI does: torch's autograd device threads can race
    # interpreter teardown ("terminate called without an active exception", pytorch#38228).
    script = (PRELUDE if prelude else "") + textwrap.dedent(code) + EXIT
    proc = subprocess.run([sys.executable, "-c", script], env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    result = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result.update(json.loads(line[len("RESULT "):]))
    return proc, result


def ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


@needs_compiler
def test_module_init_forward_backward_adamw_on_fake_cuda(cache_dir):
    proc, r = run_py("""
        out = {}
        with FakeTensorMode(), simulate_cuda(H100, Stub()):
            m = torch.nn.Sequential(torch.nn.Linear(16, 32, device="cuda"), torch.nn.GELU(),
                                    torch.nn.LayerNorm(32, device="cuda"),
                                    torch.nn.Linear(32, 4, device="cuda"))
            for kind in ("foreach", "fused"):
                opt = torch.optim.AdamW(m.parameters(), **{kind: True})
                for _ in range(2):
                    loss = m(torch.randn(8, 16, device="cuda")).pow(2).mean()
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                state = opt.state[m[0].weight]
                out[kind] = sorted({str(v.device) for k, v in state.items() if k != "step"})
            w = m[0].weight
            out.update(param=[type(w).__name__, str(w.device)], loss=str(loss.device),
                       grad_none=w.grad is None)
            x = torch.randn(4, 16).cuda()  # .cuda() of a fake cpu tensor
            x.requires_grad_()
            m(x).sum().backward()
            out.update(input_grad=str(x.grad.device), weight_grad=str(w.grad.device))
        emit(**out)
    """, cache=cache_dir)
    ok(proc)
    assert r["param"] == ["FakeTensor", "cuda:0"]
    assert r["loss"] == "cuda:0" and r["grad_none"] is True
    assert r["foreach"] == ["cuda:0"] and r["fused"] == ["cuda:0"]
    assert r["input_grad"] == "cuda:0" and r["weight_grad"] == "cuda:0"


@needs_compiler
def test_torch_cuda_queries_answer_from_the_memory_source(cache_dir):
    proc, r = run_py("""
        stub = Stub()
        c = torch.cuda
        with FakeTensorMode(), simulate_cuda(H100, stub, device_count=4, device=1):
            p = c.get_device_properties(0)
            out = dict(
                available=c.is_available(), count=c.device_count(), current=c.current_device(),
                props=[p.name, p.total_memory, p.major, p.minor, p.multi_processor_count],
                name=c.get_device_name(), cap=list(c.get_device_capability()),
                bf16=c.is_bf16_supported(), alloc=c.memory_allocated(), alloc3=c.memory_allocated(3),
                max_alloc=c.max_memory_allocated("cuda:2"), reserved=c.memory_reserved(),
                max_reserved=c.max_memory_reserved(torch.device("cuda", 0)),
                stats=c.memory_stats()["allocated_bytes.all.current"],
                info=list(c.mem_get_info()),
                accel_alloc=torch.accelerator.memory_allocated(2),
            )
            c.reset_peak_memory_stats(); c.reset_peak_memory_stats(3); c.empty_cache()
            c.synchronize()
            c.set_device(2)
            out["after_set"] = [c.current_device(), str(torch.empty(1, device="cuda").device),
                                str(torch.ones(2).cuda().device), str(torch.ones(2).to("cuda").device)]
            w = torch.randn(3, device="cuda", requires_grad=True)
            (w * 2).sum().backward()  # autograd's worker thread for device 2
            out["grad_dev2"] = str(w.grad.device)
            with c.device(3):
                out["in_device_ctx"] = c.current_device()
            out["after_ctx"] = c.current_device()
            s = c.Stream()
            with c.stream(s):
                out["in_stream"] = c.current_stream() == s
                y = torch.randn(2, device="cuda")
            c.current_stream().wait_stream(s)
            e0, e1 = c.Event(enable_timing=True), c.Event(enable_timing=True)
            e0.record(); e1.record(s); e1.wait(); e1.synchronize()
            out["events"] = [e1.query(), e0.elapsed_time(e1), c.default_stream() == c.current_stream()]
            torch.manual_seed(3)
            c.manual_seed(11)
            st = c.get_rng_state()
            c.manual_seed_all(12)
            c.set_rng_state(st)
            out["rng"] = [c.initial_seed(), str(st.dtype), list(st.shape), type(st).__name__]
            # torch.Generator("cuda"), as OLMo-core seeds its weight init: a CPU build cannot
            # make one ("Cannot get CUDA generator without ATen_cuda library").
            g = torch.Generator("cuda").manual_seed(5)
            g3 = torch.Generator(device=torch.device("cuda", 3))
            torch.nn.init.normal_(torch.empty(4, 4, device="cuda"), generator=g)
            cpu = torch.Generator()
            c.set_sync_debug_mode("warn")
            warned = c.get_sync_debug_mode()
            c.set_sync_debug_mode(0)
            out["sync_debug"] = [warned, c.get_sync_debug_mode()]
            out["generator"] = [str(g.device), str(g3.device), g.initial_seed(),
                                list(g.get_state().shape), str(cpu.device),
                                isinstance(g, torch.Generator), isinstance(cpu, torch.Generator),
                                isinstance(torch.default_generator, torch.Generator)]
            try:
                c.get_device_properties(4)
                out["bad_index"] = "no error"
            except AssertionError as e:
                out["bad_index"] = str(e)
        out["resets"] = stub.resets
        out["emptied"] = getattr(stub, "emptied", [])
        emit(**out)
    """, cache=cache_dir)
    ok(proc)
    assert r["available"] is True and r["count"] == 4 and r["current"] == 1
    assert r["props"] == ["NVIDIA H100 80GB HBM3", 81559 * 2**20, 9, 0, 132]
    assert r["name"] == "NVIDIA H100 80GB HBM3" and r["cap"] == [9, 0] and r["bf16"] is True
    assert (r["alloc"], r["alloc3"], r["max_alloc"]) == (1001, 1003, 2002)
    assert (r["reserved"], r["max_reserved"]) == (3 * 2**20 + 1, 4 * 2**20)
    assert r["stats"] == 1001 and r["accel_alloc"] == 1002
    assert r["info"] == [81559 * 2**20 - (3 * 2**20 + 1), 81559 * 2**20]
    assert r["resets"] == [1, 3]
    assert r["emptied"] == [0, 1, 2, 3]  # torch.cuda.empty_cache() empties every device's cache
    assert r["after_set"] == [2, "cuda:2", "cuda:2", "cuda:2"]
    assert r["grad_dev2"] == "cuda:2"
    assert (r["in_device_ctx"], r["after_ctx"]) == (3, 2)
    assert r["in_stream"] is True and r["events"] == [True, 0.0, True]
    assert r["rng"] == [11, "torch.uint8", [16], "Tensor"]
    # current device 2; CUDA's state is 16 bytes (seed, Philox offset), a CPU one 5056.
    assert r["sync_debug"] == [1, 0]  # OLMo-core's metric logging sets and restores it
    assert r["generator"] == ["cuda:2", "cuda:3", 5, [16], "cpu", True, True, True]
    assert "Invalid device id" in r["bad_index"]


@needs_compiler
def test_every_patch_is_undone_on_exit(cache_dir):
    proc, r = run_py("""
        import torch.cuda.memory, torch.cuda.random
        from torch._subclasses import fake_tensor
        spaces = {"torch.cuda": torch.cuda, "torch.cuda.memory": torch.cuda.memory,
                  "torch.cuda.random": torch.cuda.random, "torch.accelerator": torch.accelerator,
                  "FakeTensorMode": fake_tensor.FakeTensorMode, "fake_tensor": fake_tensor}
        before = {n: dict(vars(s)) for n, s in spaces.items()}
        avail = torch.cuda.is_available()

        def changed():
            out = []
            for n, space in spaces.items():
                now = vars(space)
                for k in set(before[n]) | set(now):
                    if k in before[n] and k in now and before[n][k] is now[k]:
                        continue
                    # torch's own bookkeeping moves as it runs: fake-tensor cache counters,
                    # submodules imported lazily
                    if k.startswith("cache_") or type(now.get(k)) is type(torch):
                        continue
                    out.append(f"{n}.{k}")
            return sorted(out)

        with FakeTensorMode():
            with simulate_cuda(H100, Stub(), device_count=2):
                inside = changed()
                torch.nn.Linear(2, 2, device="cuda")(torch.randn(1, 2, device="cuda")).sum().backward()
        try:
            with simulate_cuda(H100, Stub()):
                raise KeyError("boom")
        except KeyError:
            pass
        emit(inside=len(inside), sample=inside[:5], after=changed(),
             avail=[avail, torch.cuda.is_available()],
             cur_fn=torch.cuda.current_device.__module__,
             generator=torch.Generator is torch._C.Generator)
    """, cache=cache_dir)
    ok(proc)
    assert r["inside"] > 40, r["sample"]
    assert r["after"] == []
    assert r["generator"] is True  # torch.Generator is torch's own again
    assert r["avail"][0] == r["avail"][1] is False  # no GPU here, before and after
    assert r["cur_fn"] == "torch.cuda"


@needs_compiler
def test_more_devices_than_the_shim_was_loaded_for_is_refused(cache_dir):
    proc, r = run_py("""
        try:
            with simulate_cuda(H100, Stub(), device_count=8):
                pass
            emit(err=None)
        except ValueError as e:
            emit(err=str(e))
    """, cache=cache_dir)
    ok(proc)
    assert "ensure_fake_cuda_support(device_count=8)" in r["err"]


@needs_compiler
def test_real_cuda_allocations_still_fail_cleanly(cache_dir):
    proc, r = run_py("""
        out = {}
        with simulate_cuda(H100, Stub()):  # simulated, but outside FakeTensorMode
            try:
                torch.empty(2, device="cuda")
                out["sim"] = "created"
            except Exception as e:
                out["sim"] = f"{type(e).__name__}: {e}"
        try:
            torch.empty(2, device="cuda")
            out["plain"] = "created"
        except Exception as e:
            out["plain"] = f"{type(e).__name__}: {e}"
        emit(**out)
    """, cache=cache_dir)
    ok(proc)
    assert r["sim"].startswith("RuntimeError: memlens simulate_cuda: a real CUDA tensor was requested")
    assert r["plain"] != "created"


@needs_compiler
def test_shim_must_load_before_torch(cache_dir):
    proc, r = run_py("""
        import torch
        from memlens.cuda.build import FakeCudaError, ensure_fake_cuda_support
        try:
            ensure_fake_cuda_support()
            print("RESULT {\\"err\\": null}")
        except FakeCudaError as e:
            import json
            print("RESULT " + json.dumps({"err": str(e)}))
    """, cache=cache_dir, prelude=False)
    ok(proc)
    assert "before `import torch`" in r["err"]


def test_missing_compiler_gives_install_hint(tmp_path):
    script = """
        from memlens.cuda.build import CompilerNotFoundError, ensure_fake_cuda_support
        import json
        try:
            ensure_fake_cuda_support()
            print("RESULT " + json.dumps({"err": None}))
        except CompilerNotFoundError as e:
            print("RESULT " + json.dumps({"err": str(e)}))
    """
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    for env in ({"CXX": "/nonexistent/g++"}, {"CXX": "", "PATH": str(empty_bin)}):
        proc, r = run_py(script, cache=tmp_path / "cache", prelude=False, env=env)
        ok(proc)
        err = r["err"]
        assert err is not None, "the shim was built without a compiler?"
        assert "apt-get install g++" in err and "build-essential" in err
        assert ("`/nonexistent/g++`" in err) if env.get("CXX") else ("`g++`" in err)
    assert not (tmp_path / "cache" / "fake_cuda").exists() or not any(
        p.suffix == ".so" for p in (tmp_path / "cache" / "fake_cuda").iterdir())


@needs_compiler
def test_second_build_uses_the_cache(tmp_path):
    counter = tmp_path / "cxx-calls"
    wrapper = tmp_path / "counting-cxx"
    real = os.environ.get("CXX") or shutil.which("g++")
    wrapper.write_text(f"#!/bin/sh\necho call >> '{counter}'\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    script = """
        from memlens.cuda.build import ensure_fake_cuda_support
        import json, os
        path = ensure_fake_cuda_support()
        import torch
        print("RESULT " + json.dumps({"path": path, "mtime": os.stat(path).st_mtime_ns,
                                       "version": torch.__version__}))
    """
    cache = tmp_path / "cache"
    first, r1 = run_py(script, cache=cache, prelude=False, env={"CXX": str(wrapper)})
    ok(first)
    second, r2 = run_py(script, cache=cache, prelude=False, env={"CXX": str(wrapper)})
    ok(second)
    assert counter.read_text().count("call") == 1
    assert r1["path"] == r2["path"] and r1["mtime"] == r2["mtime"]
    assert r1["version"] in Path(r1["path"]).name
    assert [p.name for p in Path(r1["path"]).parent.iterdir()] == [Path(r1["path"]).name]


@pytest.mark.skipif(CUDA_BUILD, reason="the CPU-only build needs the shim; CUDA builds differ")
def test_cpu_build_without_shim_refuses_to_simulate(cache_dir):
    proc, r = run_py("""
        import json, torch
        from memlens.cuda.simulate import simulate_cuda
        from memlens.cuda.spec_types import DeviceSpec
        try:
            with simulate_cuda(DeviceSpec("x", "X", 2**30, 8, 0, 1), None):
                pass
            print("RESULT " + json.dumps({"err": None}))
        except RuntimeError as e:
            print("RESULT " + json.dumps({"err": str(e)}))
    """, cache=cache_dir, prelude=False)
    ok(proc)
    assert "ensure_fake_cuda_support() before `import torch`" in r["err"]


@pytest.mark.cuda_build
@needs_compiler
def test_cuda_build_never_initialises_real_cuda(cache_dir):
    proc, r = run_py("""
        from torch.utils.checkpoint import checkpoint
        calls = []
        real_init, real_count = torch._C._cuda_init, torch._C._cuda_getDeviceCount
        torch._C._cuda_init = lambda *a: calls.append("_cuda_init") or real_init(*a)
        torch._C._cuda_getDeviceCount = lambda *a: calls.append("getDeviceCount") or real_count(*a)
        # simulate first: FakeTensorMode's own __enter__ asks torch.cuda.is_available(), which
        # (unsimulated) calls cudaGetDeviceCount
        with simulate_cuda(H100, Stub(), device_count=2), FakeTensorMode():
            c = torch.cuda
            info = [c.is_available(), c.device_count(), c.current_device(), c.get_device_name(),
                    c.memory_allocated()]
            lin = torch.nn.Linear(8, 8, device="cuda")
            opt = torch.optim.AdamW(lin.parameters(), fused=True)
            x = torch.randn(4, 8, device="cuda", requires_grad=True)
            checkpoint(lambda t: torch.nn.functional.dropout(lin(t), 0.1), x,
                       use_reentrant=False).sum().backward()
            opt.step()
            c.manual_seed(1); c.get_rng_state(); c.synchronize()
            with c.stream(c.Stream()):
                torch.ones(1, device="cuda")
            c.set_device(1)
            moved = str(torch.ones(1).cuda().device)
        emit(calls=calls, info=info, moved=moved, grad=str(x.grad.device),
             initialized_after=torch.cuda.is_initialized())
    """, cache=cache_dir)
    ok(proc)
    assert r["calls"] == []
    assert r["info"][:4] == [True, 2, 0, "NVIDIA H100 80GB HBM3"]
    assert r["moved"] == "cuda:1" and r["grad"] == "cuda:0"
    assert r["initialized_after"] is False


@pytest.mark.cuda_build
def test_cuda_build_without_gpu_needs_the_hooks(cache_dir):
    # Why ensure_fake_cuda_support() loads the shim on a CUDA build without a GPU: torch's own
    # hooks reject autograd's hasPrimaryContext(0). If this starts passing, revisit that choice.
    proc, r = run_py("""
        import json, torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            w = torch.randn(2, device="cuda", requires_grad=True)
            try:
                (w * 2).sum().backward()
                err = None
            except RuntimeError as e:
                err = str(e)
        print("RESULT " + json.dumps({"err": err}))
    """, cache=cache_dir, prelude=False)
    ok(proc)
    assert r["err"] is not None and "hasPrimaryContext" in r["err"]
