"""Patches for Megatron's mixture of experts in a trace (the plugin is megatron.py).

MoE routing is drop-and-pad at capacity factor 1.0: every expert receives exactly its share
of the tokens (uniform load), so shapes do not depend on router values a trace does not have.
Each patch is `patch(plugin, module)`.
"""

from __future__ import annotations

import functools
from types import ModuleType


def transformer_config(plugin, mod: ModuleType) -> None:
    cls = mod.TransformerConfig
    original = cls.__post_init__

    @functools.wraps(original)
    def __post_init__(self):
        if getattr(self, "num_moe_experts", None):
            drop_and_pad(plugin, self)
        original(self)

    plugin.patcher.setattr(cls, "__post_init__", __post_init__)


def moe_utils(plugin, mod: ModuleType) -> None:
    """megatron-core 0.16 imports `te_general_gemm` only with Transformer Engine but its
    router tests `te_general_gemm is not None` either way: a NameError without TE. Define
    the name as the code means it (absent)."""
    if not getattr(mod, "HAVE_TE", True) and not hasattr(mod, "te_general_gemm"):
        plugin.patcher.setattr(mod, "te_general_gemm", None)


def token_dispatcher(plugin, mod: ModuleType) -> None:
    """At capacity the tokens per local expert are a known constant, which Megatron keeps
    in a host tensor made with torch.full (and reads back with .tolist()): under the fake
    mode it would be a fake tensor without values. Make it the real host tensor it is."""
    cls = mod.MoEAlltoAllTokenDispatcher
    original = cls.preprocess

    @functools.wraps(original)
    def preprocess(self, routing_map):
        out = original(self, routing_map)
        if getattr(self, "drop_and_pad", False) and out.device.type == "cpu":
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            with unset_fake_temporarily():
                import torch

                out = torch.full(tuple(out.shape), self.capacity * self.tp_size * self.ep_size,
                                 dtype=out.dtype)
        return out

    plugin.patcher.setattr(cls, "preprocess", preprocess)


def drop_and_pad(plugin, config) -> None:
    config.moe_expert_capacity_factor = 1.0
    config.moe_pad_expert_input_to_capacity = True
    plugin.note("MoE routing: tokens dropped and padded at capacity factor 1.0 (every expert "
                "gets exactly its share of tokens: uniform expert load), whatever the "
                "configuration asked; a trace has no router values to route by")


PATCHES = {
    "megatron.core.transformer.transformer_config": transformer_config,
    "megatron.core.transformer.moe.moe_utils": moe_utils,
    "megatron.core.transformer.moe.token_dispatcher": token_dispatcher,
}
