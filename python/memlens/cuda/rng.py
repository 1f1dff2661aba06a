"""CUDA random-number state of the simulated GPUs: a seed and a Philox offset per device.

Fake tensors draw no random numbers, so nothing advances the offset; the state exists so
that seeding, ``get_rng_state``/``set_rng_state`` round trips, ``fork_rng`` and activation
checkpointing (which saves and restores it) behave as on a GPU. States are real 16-byte
CPU uint8 tensors (seed then offset, little-endian int64), the size CUDA's generator uses.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import torch

DEFAULT_SEED = 67280421310721  # c10's default_rng_seed_val: a fresh CUDA generator's seed
_MASK64 = (1 << 64) - 1


@contextlib.contextmanager
def _outside_modes() -> Iterator[None]:
    # State tensors are real host memory on a GPU too; keep them out of fake/ledger modes.
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch._C._DisableTorchDispatch():
        yield


class FakeCudaRNG:
    def __init__(self, device_count: int) -> None:
        self._seed = [DEFAULT_SEED] * device_count
        self._offset = [0] * device_count

    def manual_seed(self, seed: int, index: int) -> None:
        self._seed[index] = int(seed) & _MASK64
        self._offset[index] = 0

    def manual_seed_all(self, seed: int) -> None:
        for i in range(len(self._seed)):
            self.manual_seed(seed, i)

    def seed(self, index: int) -> None:
        self.manual_seed(random.SystemRandom().getrandbits(64), index)

    def seed_all(self) -> None:
        self.manual_seed_all(random.SystemRandom().getrandbits(64))

    def initial_seed(self, index: int) -> int:
        return self._seed[index]

    def get_state(self, index: int) -> torch.Tensor:
        raw = self._seed[index].to_bytes(8, "little") + self._offset[index].to_bytes(8, "little")
        with _outside_modes():
            return torch.tensor(list(raw), dtype=torch.uint8)

    def set_state(self, state: torch.Tensor, index: int) -> None:
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor")
        from torch._subclasses.fake_tensor import is_fake

        if is_fake(state):  # shape-only: nothing to read, keep the current state
            return
        with _outside_modes():
            raw = bytes(state.detach().cpu().reshape(-1).tolist())
        if len(raw) != 16:
            raise RuntimeError(f"RNG state is wrong size: {len(raw)} bytes, expected 16")
        self._seed[index] = int.from_bytes(raw[:8], "little")
        self._offset[index] = int.from_bytes(raw[8:], "little")


class _AnyGenerator(type(torch._C.Generator)):
    """`isinstance(g, torch.Generator)` stays true of every generator (the CPU default too)."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, torch._C.Generator)


def generator_type(check_device):
    """`torch.Generator` while simulating: `torch.Generator("cuda")` (OLMo-core and torchtitan
    seed their weight init with one) is a generator of the simulated GPU; a CPU build cannot
    make a CUDA one ("Cannot get CUDA generator without ATen_cuda library"). It is a CPU
    generator underneath, which fake tensors' random ops accept and never draw from; its
    state is CUDA's 16 bytes (seed, Philox offset). `check_device(device)` gives the index."""

    class Generator(torch._C.Generator, metaclass=_AnyGenerator):
        def __new__(cls, device: Any = "cpu") -> torch._C.Generator:
            dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
            if dev.type != "cuda":
                return torch._C.Generator(dev)
            gen = super().__new__(cls)
            gen._rng = FakeCudaRNG(1)  # this generator's own seed and offset
            gen._index = check_device(dev)
            return gen

        def __init__(self, device: Any = "cpu") -> None:
            pass

        @property
        def device(self) -> torch.device:
            return torch.device("cuda", self._index)

        def manual_seed(self, seed: int) -> "Generator":
            self._rng.manual_seed(seed, 0)
            return self

        def seed(self) -> int:
            self._rng.seed(0)
            return self._rng.initial_seed(0)

        def initial_seed(self) -> int:
            return self._rng.initial_seed(0)

        def get_state(self) -> torch.Tensor:
            return self._rng.get_state(0)

        def set_state(self, state: torch.Tensor) -> "Generator":
            self._rng.set_state(state, 0)
            return self

        def get_offset(self) -> int:
            return self._rng._offset[0]

        def set_offset(self, offset: int) -> "Generator":
            self._rng._offset[0] = int(offset)
            return self

    Generator.__module__ = "torch"
    return Generator
