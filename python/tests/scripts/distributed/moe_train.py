"""Expert parallelism written by hand: `torchrun --nproc_per_node 4 moe_train.py`.

A top-1 mixture of 8 experts (MLP 256 -> 512 -> 256 each) with a fixed capacity per expert,
GShard-style: tokens are dispatched with one-hot masks (no value decides a size), sent to the
rank that holds their expert with one all-to-all, and brought back with another. Each rank
holds 8 / world experts; the router is replicated.
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn

HIDDEN, FFN, EXPERTS, TOKENS, CAPACITY = 256, 512, 8, 512, 96


class MoE(nn.Module):
    def __init__(self, ep: int):
        super().__init__()
        self.ep, self.local = ep, EXPERTS // ep
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.w1 = nn.Parameter(torch.randn(self.local, HIDDEN, FFN) * 0.02)
        self.w2 = nn.Parameter(torch.randn(self.local, FFN, HIDDEN) * 0.02)

    def forward(self, x):  # x: [TOKENS, HIDDEN]
        probs = self.router(x).softmax(-1)
        gate, expert = probs.max(-1)
        one_hot = F.one_hot(expert, EXPERTS).to(x.dtype)  # [T, E]
        position = (one_hot.cumsum(0) - 1) * one_hot  # slot of each token in its expert
        keep = one_hot * (position < CAPACITY)
        dispatch = keep.unsqueeze(-1) * F.one_hot(position.long(), CAPACITY).to(x.dtype)
        buckets = torch.einsum("tec,th->ech", dispatch, x)  # [E, C, H]: by destination rank
        received = funcol.all_to_all_single_autograd(buckets, None, None, dist.group.WORLD)
        received = received.view(self.ep, self.local, CAPACITY, HIDDEN).transpose(0, 1)
        tokens = received.reshape(self.local, self.ep * CAPACITY, HIDDEN)
        out = torch.bmm(F.gelu(torch.bmm(tokens, self.w1)), self.w2)
        out = out.view(self.local, self.ep, CAPACITY, HIDDEN).transpose(0, 1).contiguous()
        back = funcol.all_to_all_single_autograd(out.view_as(buckets), None, None, dist.group.WORLD)
        return torch.einsum("tec,ech->th", dispatch * gate[:, None, None], back)


cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if cuda:
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
torch.manual_seed(dist.get_rank())  # each rank its own experts
with torch.device(device):
    model = MoE(dist.get_world_size())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    x = torch.randn(TOKENS, HIDDEN, device=device)
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
