"""Device memory next to what the ledger sees, as labelled line items with their basis.

Two kinds, told apart by `counted_by_allocator`:
- outside the caching allocator (the CUDA context; NCCL's buffers, see nccl.py): nvidia-smi
  shows them, but torch.cuda.memory_reserved() never will.
- library workspaces PyTorch takes *through* the caching allocator (cuBLAS, cuDNN): they are
  inside allocated/reserved memory but are not op outputs, so a dispatch-level ledger misses
  them unless it adds them as allocations.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

MiB = 1 << 20


@dataclass(frozen=True)
class OutsideItem:
    label: str
    bytes: int
    basis: str
    counted_by_allocator: bool = False  # True: PyTorch allocates it through the caching allocator


# -- CUDA context ----------------------------------------------------------------------------
_CONTEXT_BASIS = (
    "approximate. The CUDA context holds the driver's state and the kernels loaded so far. "
    "With lazy module loading (CUDA >= 11.7; PyTorch sets CUDA_MODULE_LOADING=LAZY) it is a "
    "few hundred MiB: ~300 MB per process in pytorch/pytorch#107667, 300-400 MB in #20532, "
    "200-700 MB across GPUs in #28113; eager loading (older CUDA or CUDA_MODULE_LOADING="
    "EAGER) exceeded 1,000 MB. Per-card values are estimates scaled from those reports (more "
    "SMs and newer architectures load bigger kernel images), not measurements; they grow as "
    "more kernels are used."
)
_CONTEXT_MIB = {  # device name as in memlens.devices -> MiB
    "h100-80gb": 512, "h100-94gb": 512, "h100-96gb": 512, "gh200-96gb": 512,
    "gh200-144gb": 512, "h200": 512, "b200": 640, "b300": 640,
    "a100-40gb": 448, "a100-80gb": 448, "l40s": 384, "rtx-4090": 384,
}


def cuda_context_items(device: str, env: Mapping[str, str] | None = None) -> list[OutsideItem]:
    """The CUDA context of one process on one device (e.g. 'h100-80gb', 'H200', 'rtx_4090')."""
    env = os.environ if env is None else env
    key = device.strip().lower().replace("_", "-").replace(" ", "-")
    key = {"h100": "h100-80gb", "a100": "a100-80gb", "4090": "rtx-4090"}.get(key, key)
    if key not in _CONTEXT_MIB:
        raise KeyError(f"no CUDA context figure for device {device!r}; "
                       f"known: {', '.join(sorted(_CONTEXT_MIB))}")
    mib = _CONTEXT_MIB[key]
    basis = _CONTEXT_BASIS
    if env.get("CUDA_MODULE_LOADING", "LAZY").upper() == "EAGER":
        mib = max(mib, 1024)
        basis = "CUDA_MODULE_LOADING=EAGER loads every kernel at start; " + basis
    return [OutsideItem(f"CUDA context ({key})", mib * MiB, basis)]


# -- cuBLAS / cuBLASLt workspace --------------------------------------------------------------
def cublas_workspace_bytes(cc_major: int, cc_minor: int,
                           env: Mapping[str, str] | None = None) -> int:
    """Bytes of one cuBLAS workspace (at::cuda::getChosenWorkspaceSize /
    parseChosenWorkspaceSize in aten/src/ATen/cuda/CublasHandlePool.cpp).

    Default ':4096:2:16:8' = 2 x 4096 KiB + 8 x 16 KiB = 8,519,680 B, or 32 MiB on Hopper and
    Blackwell (compute capability 9.x, 10.x, 12.x). CUBLAS_WORKSPACE_CONFIG ':SIZE:COUNT...'
    overrides it: the sum of SIZE KiB x COUNT over every ':SIZE:COUNT' found; a value with none
    falls back to the default (PyTorch warns).
    """
    del cc_minor  # the choice depends on the major version only
    env = os.environ if env is None else env
    use_32mb = cc_major in (9, 10, 12)
    default = 4096 * 8 * 1024 if use_32mb else 4096 * 1024 * 2 + 16 * 1024 * 8
    text = env.get("CUBLAS_WORKSPACE_CONFIG")
    if text is None:
        return default
    matches = re.findall(r":([0-9]+):([0-9]+)", text)
    if not matches:
        return default
    return sum(int(size) * 1024 * int(count) for size, count in matches)


def cublas_workspace_items(cc_major: int, cc_minor: int, env: Mapping[str, str] | None = None,
                           handle_streams: int = 1) -> list[OutsideItem]:
    """Workspaces for `handle_streams` (thread, stream) pairs that run matmuls.

    PyTorch allocates one workspace per (cuBLAS handle, stream) on first use
    (setWorkspaceForHandle) with CUDACachingAllocator::allocate, and keeps it until exit: it is
    a long-lived block inside allocated memory. cuBLASLt shares it unless
    TORCH_CUBLASLT_UNIFIED_WORKSPACE=0, in which case Lt takes its own CUBLASLT_WORKSPACE_SIZE
    KiB (default 1024) per handle and stream.
    """
    env = os.environ if env is None else env
    size = cublas_workspace_bytes(cc_major, cc_minor, env)
    source = f"CUBLAS_WORKSPACE_CONFIG={env['CUBLAS_WORKSPACE_CONFIG']}" \
        if "CUBLAS_WORKSPACE_CONFIG" in env else "the default"
    basis = (f"getChosenWorkspaceSize for compute capability {cc_major}.{cc_minor} with "
             f"{source}: one per (handle, stream), allocated through the caching allocator on "
             "the first matmul and never freed")
    items = [OutsideItem(f"cuBLAS workspace x{handle_streams}", size * handle_streams, basis,
                         counted_by_allocator=True)]
    if env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE") == "0":  # c10::utils::check_env: "0" is off
        kib = _stoi_or(env.get("CUBLASLT_WORKSPACE_SIZE"), 1024)
        items.append(OutsideItem(f"cuBLASLt workspace x{handle_streams}",
                                 kib * 1024 * handle_streams,
                                 "TORCH_CUBLASLT_UNIFIED_WORKSPACE=0: a separate Lt workspace of "
                                 "CUBLASLT_WORKSPACE_SIZE KiB (default 1024) per (handle, "
                                 "stream), through the caching allocator",
                                 counted_by_allocator=True))
    return items


def _stoi_or(text: str | None, default: int) -> int:
    """std::stoi with PyTorch's fallback: a bad value keeps the default (with a warning)."""
    if text is None:
        return default
    m = re.match(r"\s*[+-]?\d+", text)
    return int(m.group()) if m else default


# -- cuDNN -----------------------------------------------------------------------------------
def cudnn_workspace_items(env: Mapping[str, str] | None = None) -> list[OutsideItem]:
    """cuDNN convolution workspaces: transient blocks through the caching allocator during each
    conv call. Their size depends on the algorithm cuDNN picks, so without a cap it is not
    estimated here (bytes 0); CUDNN_CONV_WSCAP_DBG=<MiB> caps every one of them."""
    env = os.environ if env is None else env
    cap = env.get("CUDNN_CONV_WSCAP_DBG")
    if cap is not None and re.fullmatch(r"\s*\d+\s*", cap):
        return [OutsideItem("cuDNN conv workspace (cap)", int(cap) * MiB,
                            f"CUDNN_CONV_WSCAP_DBG={cap.strip()} MiB: upper bound of one "
                            "conv's workspace, held only while the conv runs",
                            counted_by_allocator=True)]
    return [OutsideItem("cuDNN conv workspace", 0,
                        "not estimated: algorithm-dependent and transient (allocated through "
                        "the caching allocator for the duration of each conv call); set "
                        "CUDNN_CONV_WSCAP_DBG to bound it", counted_by_allocator=True)]
