"""Two ranks of an expert-parallel MoE layer whose tokens are exchanged by the torchtitan-style
dispatcher beside this script (an all-to-all sized by routing counts read back with
`.tolist()`). One forward; the received tokens are what the test measures."""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher  # noqa: E402

TOKENS, HIDDEN, EXPERTS, TOP_K = 1000, 256, 8, 2

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
router = torch.nn.Linear(HIDDEN, EXPERTS, device="cuda")
x = torch.randn(TOKENS, HIDDEN, device="cuda")
scores, expert_ids = router(x).topk(TOP_K, dim=-1)
counts = torch.zeros(EXPERTS, dtype=torch.int64, device="cuda").scatter_add_(
    0, expert_ids.flatten(), torch.ones_like(expert_ids.flatten()))
received, _, (sent_splits, received_splits) = AllToAllTokenDispatcher(EXPERTS).dispatch(
    x, scores, expert_ids, counts)
print("splits", sent_splits, received_splits, "received", tuple(received.shape), flush=True)
