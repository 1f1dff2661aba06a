"""Every monkey-patch of torch lives in this package, one module per area of torch (a plugin's
patches of its own library live with the plugin, plugins/). All go through `Patcher`, are
version-checked against `patcher.TESTED_VERSIONS` and are undone when the trace ends."""

from .patcher import Patcher

__all__ = ["Patcher"]
