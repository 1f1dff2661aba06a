"""`torch.clear_autocast_cache()`, heard: autocast's cache of weight casts is let go when the
outermost autocast exits (`torch.autocast.__exit__` calls it), and layer replay frees the casts
its replayed blocks stand for then (engine/layer_replay.py)."""

from __future__ import annotations

from typing import Callable

import torch

from .patcher import Patcher, check_tested


def apply(patcher: Patcher, on_cleared: Callable[[], None]) -> None:
    check_tested("torch_core", torch.__version__)
    original = torch.clear_autocast_cache

    def clear_autocast_cache():
        original()
        on_cleared()

    patcher.setattr(torch, "clear_autocast_cache", clear_autocast_cache)
