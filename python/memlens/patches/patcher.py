"""Apply attribute patches and undo them in reverse order."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_MISSING = object()


class Patcher:
    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def setattr(self, owner: Any, name: str, value: Any) -> Any:
        """Replace `owner.name` with `value`; returns the original."""
        original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(
            owner, name, _MISSING)
        self._undo.append((owner, name, original))
        setattr(owner, name, value)
        return getattr(owner, name) if original is _MISSING else original

    def defer(self, undo) -> None:
        """Call `undo()` when undoing, in reverse order with the attribute patches (for changes
        that are not attributes, such as operator registrations)."""
        self._undo.append((None, undo, None))

    def replace_everywhere(self, module: Any, name: str, value: Any,
                           modules: Callable[[], Iterable[Any]], same_name: bool = False) -> Any:
        """Replace `module.name` and every binding of the same object in `modules()`
        (`from torch.cuda.memory import memory_allocated` copies the function into a module);
        `same_name`: only bindings under the same name. Returns the original. Unless `same_name`,
        the undo also restores bindings of `value` made after the replacement (a module that
        ran `from module import name` while the patch was in place)."""
        original = vars(module).get(name, _MISSING)
        self.setattr(module, name, value)
        for mod in modules():
            if mod is module or original is _MISSING:
                continue
            for attr, bound in list(vars(mod).items()):
                if bound is original and (attr == name or not same_name):
                    self.setattr(mod, attr, value)
        if not same_name and original is not _MISSING:
            def restore_late_bindings() -> None:
                for mod in modules():
                    for attr, bound in list(vars(mod).items()):
                        if bound is value:  # identity: module globals need not be hashable
                            setattr(mod, attr, original)

            self.defer(restore_late_bindings)
        return getattr(module, name) if original is _MISSING else original

    def set_everywhere(self, modules: list[Any], name: str, value: Any) -> None:
        """replace_everywhere in modules[0], and under the same name in the others."""
        self.replace_everywhere(modules[0], name, value, lambda: modules[1:], same_name=True)

    @staticmethod
    @contextlib.contextmanager
    def swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
        """`owner.name` is `value` inside the block only (a swap for one call)."""
        patcher = Patcher()
        patcher.setattr(owner, name, value)
        try:
            yield
        finally:
            patcher.undo()

    def append(self, items: list, value: Any) -> None:
        """Add `value` to a list other modules hold by reference (mutated in place)."""
        if value not in items:
            items.append(value)
            self._undo.append((items, None, value))

    def undo(self) -> None:
        while self._undo:
            owner, name, original = self._undo.pop()
            if owner is None:  # deferred
                name()
            elif name is None:  # an append
                owner.remove(original)
            elif original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


# The one table of the versions each set of patches was written and tested against:
# area -> (library, lowest tested version, first version not tested).
TESTED_VERSIONS: dict[str, tuple[str, str, str]] = {
    "torch_core": ("torch", "2.9.0", "2.16.0"),
    "torch_data": ("torch", "2.9.0", "2.16.0"),
    "torch_loops": ("torch", "2.9.0", "2.16.0"),
    "torch_compile": ("torch", "2.9.0", "2.16.0"),
    "torch_checkpoint": ("torch", "2.13.0", "2.16.0"),
    "torch_inductor_cuda": ("torch", "2.13.0", "2.14.0"),
    "torch_distributed": ("torch", "2.9.0", "2.16.0"),
    "torch_cuda_device": ("torch", "2.13.0", "2.16.0"),
    "torch_cuda_semantics": ("torch", "2.13.0", "2.15.0"),
    "cuda_simulate": ("torch", "2.13.0", "2.15.0"),
    "cuda_graphs": ("torch", "2.13.0", "2.14.0"),
    "cuda_nvtx": ("torch", "2.9.0", "2.16.0"),
    "cuda_multi_gpu_comm": ("torch", "2.13.0", "2.15.0"),
    "megatron": ("megatron-core", "0.16.0", "0.17.0"),
    "torch_values": ("torch", "2.9.0", "2.16.0"),
    "checkpoint_files": ("torch", "2.13.0", "2.16.0"),
    "hf_accelerate": ("accelerate", "1.1.0", "1.16.0"),
    "hf_safetensors": ("safetensors", "0.4.0", "0.9.0"),
    "hf_transformers": ("transformers", "5.0.0", "5.30.0"),
    "torchao_float8": ("torchao", "0.18.0", "0.19.0"),
    "deepspeed": ("deepspeed", "0.19.0", "0.20.0"),
    "bitsandbytes": ("bitsandbytes", "0.50.0", "0.51.0"),
    "triton": ("triton", "3.8.0", "3.10.0"),
    "olmo_core": ("ai2-olmo-core", "3.0.0", "3.1.0"),
}


def check_tested(area: str, version: str) -> None:
    """check_version against the TESTED_VERSIONS row of `area`."""
    library, low, high = TESTED_VERSIONS[area]
    check_version(library, version, (low, high), stacklevel=4)


# Who hears of a library outside its tested range: the trace in progress, as a note of its
# report and snapshot (meta.notes) on every rank. A Python warning is the script's to filter
# (Megatron's pretrain_gpt.py silences UserWarnings on every rank but 0, so a trace of rank 7
# looked tested); outside a trace it is a warning still.
_version_listeners: list[Callable[[str], None]] = []


@contextlib.contextmanager
def versions_noted(add_note: Callable[[str], None]) -> Iterator[None]:
    """Inside the block, an untested version is `add_note(text)`, not a warning."""
    _version_listeners.append(add_note)
    try:
        yield
    finally:
        _version_listeners.remove(add_note)


def untested_note(library: str, version: str, tested: tuple[str, str]) -> str:
    low, high = tested
    return (f"{library} {version} is outside the range memlens' integration was tested on "
            f"[{low}, {high}): estimates may be affected")


def check_version(library: str, version: str, tested: tuple[str, str], stacklevel: int = 3
                  ) -> None:
    """Note (never fail) when a patched library is outside the versions the patches were
    tested on: the patch may then be unnecessary or wrong."""
    def key(v: str) -> tuple[int, ...]:
        parts = []
        for p in v.split("+")[0].split(".")[:3]:
            digits = "".join(ch for ch in p if ch.isdigit())
            parts.append(int(digits or 0))
        return tuple(parts)

    low, high = tested
    if key(low) <= key(version) < key(high):
        return
    if _version_listeners:
        _version_listeners[-1](untested_note(library, version, tested))
    else:
        warnings.warn(f"memlens: {library} {version} is outside the tested range [{low}, {high}); "
                      "estimates may be affected", stacklevel=stacklevel)
