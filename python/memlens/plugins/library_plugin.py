"""The shape of a plugin that patches submodules of its library as they are imported.

    class Plugin(LibraryPlugin):
        watches = {"accelerate.utils.operations": "operations"}   # module -> method
        def operations(self, mod): self.patcher.setattr(mod, ...)

The PluginHost makes one `Plugin(tracer, watcher)` when the library starts to be imported and
calls `deactivate()` when the trace ends, which undoes every patch the plugin applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..patches.patcher import Patcher

if TYPE_CHECKING:
    from .context import PluginContext
    from .imports import ImportWatcher


class LibraryPlugin:
    watches: dict[str, str] = {}

    def __init__(self, tracer: PluginContext, watcher: ImportWatcher) -> None:
        self.tracer = tracer
        self.patcher = Patcher()
        for module, method in self.watches.items():
            watcher.watch(module, getattr(self, method))

    def deactivate(self) -> None:
        self.patcher.undo()
