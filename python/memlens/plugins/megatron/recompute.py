"""Megatron's output-discarding checkpoint (`tensor_parallel.CheckpointWithoutOutput`: selective
recompute of `layernorm`, `moe_act`, `mla_up_proj`, ...) where Transformer Engine is absent.

megatron-core 0.19 reads TE's FP8 state in it whatever the configuration: its
`CheckpointWithoutOutput(fp8=False)` sets `self.fp8 = fp8 is not None`, true, so the checkpoint
calls `FP8GlobalStateManager.is_fp8_enabled()`, and in backward TE's `activation_recompute_forward`
and `fp8_autocast`: names it defines only when TE imports (a NameError without it, on a GPU too).
They stand in here: FP8 is enabled inside memlens' FP8 context (fp8_linear.py), whose recipe the
recomputation runs under again.

0.19 also hands the recomputed output to the discarded one without a copy, through a C++
extension compiled at first use (`_get_share_storage`, `load_inline`): the discarded output's
storage is made to point at the recomputed one's, holding a reference to it. That allocates
nothing, and the recomputed output is kept until the checkpoint's backward anyway (`ctx.outputs`),
which comes after its consumers' (the consumer's backward needs it first): so the stand-in
shares nothing and compiles nothing, and every byte and its lifetime are the same.
"""

from __future__ import annotations

import contextlib
from types import ModuleType


def checkpoint_without_output(plugin, mod: ModuleType) -> None:
    if getattr(mod, "HAVE_TE", True):
        return
    if hasattr(mod, "_get_share_storage"):
        plugin.patcher.setattr(mod, "_get_share_storage", lambda: _share_nothing)
    if not hasattr(mod, "CheckpointWithoutOutputFunction"):
        return

    class FP8GlobalStateManager:
        """TE's FP8 state, as memlens' FP8 context (fp8_linear.py) keeps it."""

        @staticmethod
        def is_fp8_enabled() -> bool:
            return plugin.fp8_recipe is not None

        @staticmethod
        def get_fp8_recipe():
            return plugin.fp8_recipe

    def fp8_autocast(enabled=True, fp8_recipe=None, **_):
        from .fp8_linear import fp8_autocast as memlens_fp8_autocast

        return memlens_fp8_autocast(plugin, fp8_recipe if enabled else None)

    for name, value in (("FP8GlobalStateManager", FP8GlobalStateManager),
                        ("fp8_autocast", fp8_autocast),
                        ("activation_recompute_forward", lambda **_: contextlib.nullcontext())):
        if not hasattr(mod, name):
            plugin.patcher.setattr(mod, name, value)


def _share_nothing(output, recomputed) -> None:
    """0.19's zero-copy hand-over of the recomputed output: no bytes move (see the module)."""


PATCHES = {
    "megatron.core.tensor_parallel.random": checkpoint_without_output,
}
