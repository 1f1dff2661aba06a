"""OLMo-core (`ai2-olmo-core`): its checkpoint writer in the traced thread.

OLMo-core's trainer saves a sharded checkpoint at step 0 through torch.distributed.checkpoint,
and its writer (`olmo_core.distributed.checkpoint.filesystem.RemoteFileSystemWriter`) resolves
each shard (`DTensor.to_local` on a fake tensor) in a `ThreadPoolExecutor` of its own: outside
the trace's modes ("fake_mode.in_kernel_invocation must be False"). The pool runs its jobs in
the submitting thread (patches/inline_pool.py); the checkpoint written is the same (fake
tensors are pickled as meta tensors: shapes, no bytes).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

from ...patches.inline_pool import InlineThreadPoolExecutor
from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin


class Plugin(LibraryPlugin):
    watches = {"olmo_core.distributed.checkpoint.filesystem": "filesystem"}

    def filesystem(self, mod: ModuleType) -> None:
        from olmo_core.version import VERSION

        check_tested("olmo_core", VERSION)
        if getattr(mod, "ThreadPoolExecutor", None) is ThreadPoolExecutor:
            self.patcher.setattr(mod, "ThreadPoolExecutor", InlineThreadPoolExecutor)
