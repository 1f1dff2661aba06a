"""``simulate_cuda``: inside it, ``torch.cuda`` and ``torch.accelerator`` answer as the target GPU.

Every patch of torch.cuda / torch.accelerator lives in this module or, for CUDA graphs and
MemPools, in graphs.py and mem_pools.py (the other torch patches are in memlens/patches/), is
version-checked (patches.patcher.TESTED_VERSIONS) and is undone on exit.
Nothing here initialises real CUDA: while simulating, ``torch.cuda._lazy_init`` is a no-op inside
FakeTensorMode and refuses outside it, and FakeTensorMode keeps avoiding device init (it asks
``torch.cuda.is_available()``, which we make True). The shim from build.py must have been
loaded before ``import torch`` (on a CUDA build without a GPU too: see shim.cpp).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..patches.patcher import Patcher, check_tested
from . import build, graphs, mem_pools, streams
from .device_state import SimulatedDevices
from .rng import FakeCudaRNG, generator_type
from .spec_types import DeviceSpec


class MemorySource(Protocol):
    """Where ``torch.cuda.memory_*`` answers come from (the ledger), per device index."""

    def allocated(self, device_index: int) -> int: ...
    def max_allocated(self, device_index: int) -> int: ...
    def reset_peak(self, device_index: int) -> None: ...
    def reserved(self, device_index: int) -> int: ...
    def max_reserved(self, device_index: int) -> int: ...
    def empty_cache(self, device_index: int) -> None: ...


@dataclass(frozen=True)
class FakeDeviceProperties:
    """What ``torch.cuda.get_device_properties`` returns during a simulation."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    warp_size: int = 32

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count}) [simulated]")


def _memory_api(dev: SimulatedDevices, spec: DeviceSpec, source: MemorySource) -> dict[str, Any]:
    def allocated(device: Any = None) -> int:
        return int(source.allocated(dev.check(device)))

    def max_allocated(device: Any = None) -> int:
        return int(source.max_allocated(dev.check(device)))

    def reserved(device: Any = None) -> int:
        return int(source.reserved(dev.check(device)))

    def max_reserved(device: Any = None) -> int:
        return int(source.max_reserved(dev.check(device)))

    def reset_peak(device: Any = None) -> None:
        source.reset_peak(dev.check(device))

    def stats(device: Any = None) -> dict[str, int]:
        i = dev.check(device)
        a, r = source.allocated(i), source.reserved(i)
        ma, mr = source.max_allocated(i), source.max_reserved(i)
        out = {"num_alloc_retries": 0, "num_ooms": 0}
        for key, cur, peak in (("allocated_bytes", a, ma), ("active_bytes", a, ma), ("reserved_bytes", r, mr)):
            out[f"{key}.all.current"], out[f"{key}.all.peak"] = int(cur), int(peak)
        return dict(sorted(out.items()))

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return (spec.total_memory_bytes - reserved(device), spec.total_memory_bytes)

    def summary(device: Any = None, abbreviated: bool = False) -> str:
        s = stats(device)
        rows = [f"{k:<28} {v:>20,}" for k, v in s.items()]
        return f"memlens simulated {spec.display_name} (cuda:{dev.check(device)})\n" + "\n".join(rows)

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    def empty_cache() -> None:
        for i in range(dev.count):
            source.empty_cache(i)

    return {
        "memory_allocated": allocated, "max_memory_allocated": max_allocated,
        "memory_reserved": reserved, "max_memory_reserved": max_reserved,
        "memory_cached": reserved, "max_memory_cached": max_reserved,
        "reset_peak_memory_stats": reset_peak, "reset_max_memory_allocated": reset_peak,
        "reset_max_memory_cached": reset_peak, "reset_accumulated_memory_stats": noop,
        "memory_stats": stats, "mem_get_info": mem_get_info, "memory_summary": summary,
        "empty_cache": empty_cache,
    }


def _cuda_api(dev: SimulatedDevices, spec: DeviceSpec, rng: FakeCudaRNG) -> dict[str, Any]:
    props = FakeDeviceProperties(spec.display_name, spec.total_memory_bytes, spec.major,
                                 spec.minor, spec.sm_count)

    def set_device(device: Any) -> None:
        i = dev.index(device)
        if i >= 0:  # negative is a no-op, as in torch
            dev.set(i)

    def exchange_device(index: int) -> int:  # behind torch.cuda.device(...)
        if index < 0:
            return -1
        prev = dev.current()
        dev.set(index)
        return prev

    def get_device_properties(device: Any = None) -> FakeDeviceProperties:
        dev.check(device)
        return props

    def get_device_name(device: Any = None) -> str:
        return get_device_properties(device).name

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        dev.check(device)
        return (spec.major, spec.minor)

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return spec.major >= 8 or including_emulation  # pre-Ampere emulates bf16

    def synchronize(device: Any = None) -> None:
        streams.STREAMS.synchronize(dev.check(device))

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    def lazy_init() -> None:
        # Inside FakeTensorMode torch's C++ never asks for it and Python callers get a no-op;
        # otherwise a real CUDA tensor is being made, and there is no GPU. Raising also keeps
        # C++ from marking CUDA initialised for the rest of the process.
        if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
            raise RuntimeError(
                "memlens simulate_cuda: a real CUDA tensor was requested, outside FakeTensorMode "
                "or by its fallback for an op without a fake kernel (e.g. aten::record_stream); "
                "the simulated GPU only holds fake tensors")

    sync_debug = [0]  # torch.cuda.set_sync_debug_mode: 0 default, 1 warn, 2 error

    def set_sync_debug_mode(debug_mode: int | str) -> None:
        if isinstance(debug_mode, str):
            modes = {"default": 0, "warn": 1, "error": 2}
            if debug_mode not in modes:
                raise RuntimeError(
                    "invalid value of debug_mode, expected one of `default`, `warn`, `error`")
            debug_mode = modes[debug_mode]
        sync_debug[0] = int(debug_mode)

    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        return rng.get_state(dev.check(device))

    def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        rng.set_state(new_state, dev.check(device))

    def set_rng_state_all(new_states: Any) -> None:
        for i, state in enumerate(new_states):
            rng.set_state(state, i)

    return {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lazy_init,  # never a real cudaGetDeviceCount-dependent init
        "init": noop,
        "device_count": lambda: dev.count,
        "current_device": dev.current,
        "set_device": set_device,
        "_exchange_device": exchange_device,
        # Its own function (Dynamo refuses one handler registered for two torch functions).
        "_maybe_exchange_device": lambda index: exchange_device(index),
        "get_device_properties": get_device_properties,
        "get_device_name": get_device_name,
        "get_device_capability": get_device_capability,
        "is_bf16_supported": is_bf16_supported,
        "is_tf32_supported": lambda: spec.major >= 8,
        "synchronize": synchronize,
        "ipc_collect": noop,
        "Stream": streams.FakeStream,
        "Event": streams.FakeEvent,
        "StreamContext": streams.StreamContext,
        "stream": streams.stream,
        "current_stream": streams.STREAMS.current,
        "default_stream": streams.STREAMS.default,
        "set_stream": streams.STREAMS.set,
        "manual_seed": lambda seed: rng.manual_seed(seed, dev.current()),
        "manual_seed_all": rng.manual_seed_all,
        "seed": lambda: rng.seed(dev.current()),
        "seed_all": rng.seed_all,
        "initial_seed": lambda: rng.initial_seed(dev.current()),
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "get_rng_state_all": lambda: [rng.get_state(i) for i in range(dev.count)],
        # OLMo-core's metric logging sets it around its device-to-host copies.
        "set_sync_debug_mode": set_sync_debug_mode,
        "get_sync_debug_mode": lambda: sync_debug[0],
        "set_rng_state_all": set_rng_state_all,
    }


def _accelerator_api(dev: SimulatedDevices, memory: dict[str, Any]) -> dict[str, Any]:
    def set_index(device: Any) -> None:
        i = dev.index(device)
        if i >= 0:
            dev.set(i)

    def synchronize(device: Any = None) -> None:
        streams.STREAMS.synchronize(dev.check(device))

    api = {
        "device_count": lambda: dev.count,
        "current_device_index": dev.current, "current_device_idx": dev.current,
        "set_device_index": set_index, "set_device_idx": set_index,
        # A function of its own, not torch.cuda's: Dynamo keeps one handler per function and
        # refuses to register the same one twice (torch.compile of a CUDA target).
        "current_stream": lambda device=None: streams.STREAMS.current(device),
        "set_stream": streams.STREAMS.set,
        "synchronize": synchronize,
        "get_memory_info": memory["mem_get_info"],
        "empty_host_cache": memory["empty_cache"],
    }
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_stats", "empty_cache"):
        api[name] = memory[name]
    return api


def _modules(prefix: str) -> list[Any]:
    root = sys.modules[prefix]
    others = [m for n, m in list(sys.modules.items()) if n.startswith(prefix + ".") and m is not None]
    return [root, *others]


def _check_torch() -> None:
    check_tested("cuda_simulate", torch.__version__)
    if not torch.cuda._is_compiled() and torch._C._accelerator_getAccelerator() is None:
        raise RuntimeError("fake CUDA on this CPU-only torch build needs the memlens shim: call "
                           "memlens.cuda.build.ensure_fake_cuda_support() before `import torch`")
    if torch.cuda._is_compiled() and build.loaded_shim() is None and build._driver_gpu_count() == 0:
        warnings.warn("torch has CUDA but no GPU is visible and the memlens shim is not loaded: "
                      "backward on fake cuda tensors will fail (hasPrimaryContext); call "
                      "memlens.cuda.build.ensure_fake_cuda_support() before `import torch`", stacklevel=3)


_active = threading.Lock()


@contextlib.contextmanager
def simulate_cuda(spec: DeviceSpec, memory_source: MemorySource, *, device_count: int = 1,
                  device: int = 0) -> Iterator[None]:
    """Make user code see ``device_count`` GPUs of ``spec`` (current device ``device``).

    Use it together with FakeTensorMode: tensors stay fake; this only answers the questions
    user code asks ``torch.cuda`` / ``torch.accelerator``. Enter it first: unsimulated,
    FakeTensorMode's ``__enter__`` calls ``torch.cuda.is_available()``, which on a CUDA build
    calls cudaGetDeviceCount. Not reentrant.
    """
    _check_torch()
    if not 0 <= device < device_count:
        raise ValueError(f"device {device} is outside 0..{device_count - 1}")
    dev = SimulatedDevices(device_count, build.loaded_shim())
    from torch._subclasses import fake_tensor

    if not _active.acquire(blocking=False):
        raise RuntimeError("simulate_cuda is already active in this process")
    memory = _memory_api(dev, spec, memory_source)
    patches = Patcher()
    entered = False
    try:
        cuda_mods = _modules("torch.cuda")
        for name, value in {**_cuda_api(dev, spec, FakeCudaRNG(device_count)), **memory}.items():
            patches.set_everywhere(cuda_mods, name, value)
        patches.setattr(torch, "Generator", generator_type(dev.check))
        patches.setattr(torch.cuda, "_initialized", True)  # checkpoint reads it to save CUDA RNG state
        accel_mods = _modules("torch.accelerator")
        for name, value in _accelerator_api(dev, memory).items():
            patches.set_everywhere(accel_mods, name, value)
        # FakeTensorMode decides from torch.cuda.is_available() whether to avoid device init;
        # there is no device, so it must keep avoiding it, and must not create a real
        # tensor to "initialise the GPU context" when it meets a cuda device.
        patches.setattr(fake_tensor.FakeTensorMode, "avoid_device_init", property(lambda self: True))
        patches.setattr(fake_tensor, "init_gpu_context", lambda device: None)
        dev.enter(device)  # our guard becomes torch's CUDA guard (CUDA build), device selected
        entered = True
        # The ledger's source is also told of waits between streams (when it listens).
        listener = memory_source if hasattr(memory_source, "stream_waited") else None
        streams.STREAMS.bind(dev, listener)
        graphs.install(patches, cuda_mods,
                       memory_source if hasattr(memory_source, "graph_pool_event") else None)
        mem_pools.install(patches, cuda_mods)  # its pools' events go where the graphs' go
        yield
    finally:
        streams.STREAMS.bind(None)
        if entered:
            dev.exit()
        patches.undo()
        _active.release()
