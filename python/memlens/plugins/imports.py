"""Run a callback right after a module has been imported (a post-import hook).

A `sys.meta_path` finder that lets the ordinary finders locate the module and wraps its loader,
so the callback sees the module once its body has run and before the importer gets it: what the
callback patches is what `from module import name` then binds. A module imported before the
watcher was installed gets its callback at once.
"""

from __future__ import annotations

import importlib.abc
import sys
from types import ModuleType
from typing import Callable

Callback = Callable[[ModuleType], None]


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader, before: Callback, after: Callback) -> None:
        self._loader = loader
        self._before, self._after = before, after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._before(module)
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str):  # get_source, is_package, ... for tracebacks and runpy
        return getattr(self._loader, name)


class ImportWatcher(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._early: dict[str, list[Callback]] = {}
        self._busy: set[str] = set()

    def watch(self, name: str, callback: Callback) -> None:
        """`callback(module)` once `name` is imported (now, if it already is)."""
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self._callbacks.setdefault(name, []).append(callback)

    def watch_start(self, name: str, callback: Callback) -> None:
        """`callback(module)` when `name` starts to be imported, before its body runs (now, if it
        is imported already): a plugin that patches the package's submodules must be in place
        before the package's own `__init__` imports them."""
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self._early.setdefault(name, []).append(callback)

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)
        self._callbacks.clear()
        self._early.clear()

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self._busy or (fullname not in self._callbacks and
                                      fullname not in self._early):
            return None
        self._busy.add(fullname)  # the other finders, not this one, locate the module
        try:
            spec = _find_elsewhere(self, fullname, path, target)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return spec

        # The callbacks are taken when the module runs, not here: a probe such as
        # `importlib.util.find_spec("accelerate")` (transformers asks which libraries are
        # installed) finds a spec that is never loaded.
        def before(module: ModuleType) -> None:
            for cb in self._early.pop(fullname, []):
                cb(module)

        def after(module: ModuleType) -> None:
            for cb in self._callbacks.pop(fullname, []):  # including those watched meanwhile
                cb(module)

        spec.loader = _NotifyingLoader(spec.loader, before, after)
        return spec


def _find_elsewhere(me, fullname, path, target):
    for finder in sys.meta_path:
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None
