"""A small foreach AdamW training step traced on the CPU target, as the rows of its
allocations: what the engine's fast-path tests (engine/test_inplace_ops.py,
engine/test_like_ops.py) compare with the fast paths on and off."""

from __future__ import annotations

import torch

from memlens import Tracer


def allocations() -> list[tuple]:
    """(requested bytes, alloc seq, free seq, op, category, stack) of every allocation."""
    with Tracer("cpu", iterations=1) as tracer:
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 8))
        opt = torch.optim.AdamW(model.parameters(), foreach=True)
        for _ in range(2):
            model(torch.randn(16, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
    a = tracer.snapshot()["allocations"]
    return [(a["requested_bytes"][i], a["alloc_seq"][i], a["free_seq"][i], a["op"][i],
             a["category"][i], a["stack"][i]) for i in range(len(a["bytes"]))]
