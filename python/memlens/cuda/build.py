"""Compile the fake-CUDA shim (shim.cpp) once per torch install and load it before torch.

Nothing here imports torch: the shim's CUDA hooks only take effect if they are registered
before torch's first call to ``at::detail::getCUDAHooks()``, which happens during
``import torch``. The torch install is found with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("memlens.cuda")

SHIM_SOURCE = Path(__file__).with_name("shim.cpp")
# Autograd starts one worker thread per device the guard reports, and torch has a known race
# between those threads and interpreter exit ("terminate called without an active exception",
# pytorch#38228): 2 of 60 exits aborted with 8 devices, 0 of 60 with 1. Ask for what you use.
DEFAULT_DEVICE_COUNT = 1
_CXX_FLAGS = ("-std=c++20", "-O1", "-shared", "-fPIC")
_INSTALL_HINT = (
    "Install one: `apt-get install g++` (Debian/Ubuntu; or `apt-get install build-essential`), "
    "`dnf install gcc-c++` (Fedora/RHEL), or point the CXX environment variable at a C++20 compiler."
)


class FakeCudaError(RuntimeError):
    """The shim could not be built or loaded."""


class CompilerNotFoundError(FakeCudaError):
    """No C++ compiler to build the shim with."""


@dataclass(frozen=True)
class TorchInstall:
    root: Path  # .../site-packages/torch
    version: str
    git_version: str

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    @property
    def cuda_build(self) -> bool:
        return (self.lib_dir / "libtorch_cuda.so").exists()

    @property
    def rocm_build(self) -> bool:
        return (self.lib_dir / "libtorch_hip.so").exists()


class Shim:
    """The loaded shim's C entry points (see the extern "C" block of shim.cpp)."""

    def __init__(self, path: str, cuda_build: bool) -> None:
        self.path, self.cuda_build = path, cuda_build
        lib = self._lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        c_int, c_ll, c_ptr = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
        for name, res, args in (
            ("install", c_int, [c_int, c_int]), ("take_guard", c_ptr, []),
            ("restore_guard", None, [c_ptr]), ("device_count", c_int, []),
            ("current_device", c_int, []), ("set_device", None, [c_int]),
            ("current_stream", c_ll, [c_int]), ("set_stream", None, [c_int, c_ll]),
            ("new_stream", c_ll, []), ("pinned_bytes", c_ll, []),
        ):
            fn = getattr(lib, "memlens_fake_cuda_" + name)
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)


_loaded: Shim | None = None


def find_torch() -> TorchInstall:
    """The torch this interpreter would import, read from disk without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise FakeCudaError(f"torch is not installed for {sys.executable}")
    root = Path(spec.origin).resolve().parent
    text = (root / "version.py").read_text(encoding="utf-8")

    def field(name: str) -> str:
        m = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M)
        return m.group(1) if m else "unknown"

    return TorchInstall(root, field("__version__"), field("git_version"))


def cache_dir() -> Path:
    base = os.environ.get("MEMLENS_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "memlens"


def shim_path(torch_install: TorchInstall) -> Path:
    """Where the shim for this torch install and this shim source is cached."""
    h = hashlib.sha256()
    for part in (SHIM_SOURCE.read_bytes(), torch_install.version.encode(),
                 torch_install.git_version.encode(), str(torch_install.root).encode(),
                 " ".join(_CXX_FLAGS).encode()):
        h.update(part)
        h.update(b"\0")
    safe_version = re.sub(r"[^A-Za-z0-9.+_-]", "_", torch_install.version)
    return cache_dir() / "fake_cuda" / f"shim-torch{safe_version}-{h.hexdigest()[:16]}.so"


def _compiler() -> list[str]:
    cxx = os.environ.get("CXX") or "g++"
    argv = shlex.split(cxx)
    found = shutil.which(argv[0]) if argv else None
    if not found:
        where = "not found on PATH" if os.sep not in cxx else "does not exist or is not executable"
        raise CompilerNotFoundError(
            f"memlens needs a C++ compiler to build its fake-CUDA shim (once per torch version). "
            f"Tried: `{cxx}` ({where}; from {'$CXX' if os.environ.get('CXX') else 'the default g++'}). "
            + _INSTALL_HINT
        )
    return [found, *argv[1:]]


def _cxx11_abi(torch_install: TorchInstall) -> int:
    # Only torch knows which libstdc++ ABI it was built with; ask it in a child process so
    # that this process can still load the shim before its own `import torch`.
    probe = "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or r.stdout.strip().splitlines()[-1:] not in (["0"], ["1"]):
        raise FakeCudaError(f"could not read torch's C++ ABI with `{probe}`: {r.stderr[-2000:]}")
    return int(r.stdout.strip().splitlines()[-1])


def build_shim(torch_install: TorchInstall | None = None) -> Path:
    """Return the cached shim, compiling it first if needed (atomic: temp file + rename)."""
    ti = torch_install or find_torch()
    out = shim_path(ti)
    if out.exists():
        return out
    cxx = _compiler()
    abi = _cxx11_abi(ti)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    inc = ti.root / "include"
    cmd = [*cxx, *_CXX_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-I{inc}", f"-I{inc / 'torch' / 'csrc' / 'api' / 'include'}",
           str(SHIM_SOURCE), f"-L{ti.lib_dir}", "-lc10", "-ltorch_cpu",
           f"-Wl,-rpath,{ti.lib_dir}", "-o", tmp]
    log.info("building the fake-CUDA shim for torch %s: %s", ti.version, shlex.join(cmd))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError as e:  # vanished between which() and run()
        os.unlink(tmp)
        raise CompilerNotFoundError(f"Tried: `{shlex.join(cmd)}` ({e}). " + _INSTALL_HINT) from e
    if r.returncode != 0:
        os.unlink(tmp)
        tail = "\n".join(r.stderr.splitlines()[-40:])
        raise FakeCudaError(f"building the fake-CUDA shim failed:\n$ {shlex.join(cmd)}\n{tail}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)  # concurrent builders each rename a complete file
    return out


def _driver_gpu_count() -> int:
    """GPUs the NVIDIA driver shows this process; 0 without a driver. Never imports torch."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def loaded_shim() -> Shim | None:
    """The shim loaded into this process, if any."""
    return _loaded


def ensure_fake_cuda_support(device_count: int = DEFAULT_DEVICE_COUNT) -> str | None:
    """Make fake ``cuda`` tensors (forward, backward, optimizers) work on this torch build.

    CPU-only build: builds/loads the shim (device guard + CUDA hooks). CUDA build with no
    visible GPU: loads it for its hooks only (torch's real hooks reject autograd's
    ``hasPrimaryContext(0)`` when no device exists). CUDA build with a GPU, or ROCm: does
    nothing and returns None. Must run before ``import torch``. ``device_count`` bounds
    the device indices fake tensors may use (autograd sizes its queues from it at the first
    backward): pass the GPUs per node a simulated rank may select (LOCAL_RANK < count).
    """
    global _loaded
    if not 1 <= device_count <= 64:
        raise ValueError(f"device_count must be in 1..64, got {device_count}")
    if _loaded:
        _loaded.install(device_count, int(_loaded.cuda_build))
        return _loaded.path
    ti = find_torch()
    if ti.rocm_build or (ti.cuda_build and _driver_gpu_count() > 0):
        return None
    if "torch" in sys.modules:
        raise FakeCudaError(
            "ensure_fake_cuda_support() must run before `import torch`: torch caches its CUDA "
            "hooks while importing (load memlens.cuda.build first in the worker process)"
        )
    shim = Shim(str(build_shim(ti)), ti.cuda_build)
    got = shim.install(device_count, int(ti.cuda_build))
    want = 2 if ti.cuda_build else 3  # 1 = our guard, 2 = our hooks
    if got != want:
        raise FakeCudaError(f"fake-CUDA shim {shim.path} registered {got}, expected {want}")
    _loaded = shim
    return shim.path
