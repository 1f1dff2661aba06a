"""`flash_attn` (FlashAttention-2) for a traced GPU job on a machine without it.

Fine-tuning scripts ask for `attn_implementation="flash_attention_2"` (transformers), or call
`flash_attn_func` themselves; the package needs a CUDA toolkit to build, so the machine that
estimates the job rarely has it, and transformers then refuses ("the package for
FlashAttention2 doesn't seem to be installed"). While a CUDA target is traced and no
`flash_attn` is installed, a stand-in (flash_attn_standin/) is importable as `flash_attn`, and
`importlib.metadata` knows it as flash-attn of the version it says (transformers checks the
distribution's name and version). Its attention is PyTorch's FlashAttention-2, which allocates
what flash-attn's does; a note says the stand-in ran. Undone when the trace ends.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable

from ..patches.patcher import Patcher

STANDIN = Path(__file__).with_name("flash_attn_standin")
NAME = "flash_attn"
NOTE = ("flash-attn is not installed here: its functions ran as memlens' stand-in, on PyTorch's "
        "FlashAttention-2 kernels, which allocate what flash-attn's allocate")


def _version() -> str:
    text = (STANDIN / "__init__.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]


class _Distribution(metadata.Distribution):
    """What `importlib.metadata` reads of an installed flash-attn: its name and version, and
    that it provides the `flash_attn` package (packages_distributions)."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {_version()}\n"
        if filename == "top_level.txt":
            return f"{NAME}\n"
        return None

    def locate_file(self, path):
        return STANDIN / str(path)


class StandInFinder(importlib.abc.MetaPathFinder):
    def __init__(self, note: Callable[[], None]) -> None:
        self.note = note

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None  # submodules are found in the package's folder
        spec = importlib.util.spec_from_file_location(
            NAME, STANDIN / "__init__.py", submodule_search_locations=[str(STANDIN)])
        execute = spec.loader.exec_module

        def exec_module(module) -> None:  # noted when imported, not when only looked for
            self.note()
            execute(module)

        spec.loader.exec_module = exec_module
        return spec

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        name = context.name
        if name is None or name.replace("-", "_").lower() == NAME:
            yield _Distribution()


def apply(patcher: Patcher, add_note: Callable[[str], None]) -> None:
    """Make the stand-in importable, unless a real flash_attn is (or a stand-in already is)."""
    if NAME in sys.modules or importlib.machinery.PathFinder.find_spec(NAME) is not None:
        return
    finder = StandInFinder(lambda: add_note(NOTE))
    sys.meta_path.append(finder)  # after the real finders: an installed package wins

    def undo() -> None:
        while finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m == NAME or m.startswith(NAME + ".")]:
            del sys.modules[name]
        _forget_cached_answers()

    patcher.defer(undo)
    _forget_cached_answers()


def _forget_cached_answers() -> None:
    """transformers caches whether flash-attn is installed, and which distribution provides
    which package: asked before the trace (or during it), the answer would outlive it."""
    utils = sys.modules.get("transformers.utils.import_utils")
    for name in ("is_flash_attn_2_available", "_package_distribution_mapping"):
        cached = getattr(utils, name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
