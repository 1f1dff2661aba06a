"""Current device and current stream per thread of the simulated GPUs.

With the shim loaded, the state lives in its C++ device guard, so Python
(``torch.cuda.current_device()``), C++ (``.cuda()`` / ``.to("cuda")`` pick the guard's
device) and autograd's worker threads (the engine sets their device through the guard)
agree. Without it (a CUDA build with a real GPU, where memlens loads no shim) the state is
Python-only and C++ paths keep their own.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import torch

from .build import Shim


class _PythonBackend:
    def __init__(self) -> None:
        self._tls = threading.local()
        self._ids = itertools.count(1)

    def current_device(self) -> int:
        return getattr(self._tls, "device", 0)  # new threads start on device 0, as in CUDA

    def set_device(self, index: int) -> None:
        self._tls.device = index

    def _streams(self) -> dict[int, int]:
        if not hasattr(self._tls, "streams"):
            self._tls.streams = {}
        return self._tls.streams

    def current_stream(self, index: int) -> int:
        return self._streams().get(index, 0)

    def set_stream(self, index: int, stream_id: int) -> None:
        self._streams()[index] = stream_id

    def new_stream(self) -> int:
        return next(self._ids)


class SimulatedDevices:
    """``count`` devices; parses device arguments the way torch.cuda does."""

    def __init__(self, count: int, shim: Shim | None) -> None:
        if shim is not None and count > shim.device_count():
            # autograd sizes its per-device queues from the guard at the first backward
            raise ValueError(f"simulating {count} devices needs ensure_fake_cuda_support("
                             f"device_count={count}) first (before the first backward)")
        self.count = count
        self._shim = shim
        self._backend: Any = shim if shim is not None else _PythonBackend()
        self._saved: list[tuple[Any, int]] = []

    def enter(self, device: int) -> None:
        prev_guard = self._shim.take_guard() if self._shim is not None else None
        self._saved.append((prev_guard, self.current()))
        self.set(device)

    def exit(self) -> None:
        prev_guard, prev_device = self._saved.pop()
        self._backend.set_device(prev_device)
        if self._shim is not None:
            self._shim.restore_guard(prev_guard)

    def current(self) -> int:
        return self._backend.current_device()

    def set(self, index: int) -> None:
        self._backend.set_device(self.check(index))

    def index(self, device: Any = None) -> int:
        """A device argument as torch.cuda takes it (None, int, str, torch.device) → index."""
        if device is None:
            return self.current()
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            return self.current() if device.index is None else device.index
        if isinstance(device, int):
            return device
        raise ValueError(f"Expected a torch.device, str or int, got {type(device).__name__}")

    def check(self, device: Any = None) -> int:
        i = self.index(device)
        if not 0 <= i < self.count:
            raise AssertionError(f"Invalid device id {i}: the simulation has {self.count} device(s)")
        return i

    # streams: ids only; streams.py turns them into torch.Stream values
    def current_stream(self, index: int) -> int:
        return int(self._backend.current_stream(index))

    def set_stream(self, index: int, stream_id: int) -> None:
        self._backend.set_stream(index, stream_id)

    def new_stream(self) -> int:
        return int(self._backend.new_stream())
