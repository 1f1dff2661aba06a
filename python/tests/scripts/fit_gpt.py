"""A small GPT trained with tensor parallelism and activation recomputation, launched as
`torchrun --nproc_per_node G fit_gpt.py --batch-size 4 --tp 2 --recompute selective`.

Pure bf16 weights and AdamW (as a memory-lean recipe does), eager attention that materialises the
scores (so selective recomputation, which recomputes only the attention core, matters), no
biases and no dropout. Tensor parallelism uses DTensor: q, k, v and fc column-wise, proj and
out row-wise, over the `tp` dimension of a (dp, tp) mesh; the data-parallel ranks all-reduce
their gradients by hand.

    --recompute none       keep every activation for the backward pass
    --recompute selective  recompute the attention core (scores, softmax, weighted sum)
    --recompute full       keep only each block's input, recompute the block in backward
"""

import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--seq-len", type=int, default=8192)
parser.add_argument("--n-layer", type=int, default=4)
parser.add_argument("--n-embd", type=int, default=4096)
parser.add_argument("--n-head", type=int, default=32)
parser.add_argument("--vocab-size", type=int, default=8192)
parser.add_argument("--tp", type=int, default=1)
parser.add_argument("--recompute", choices=["none", "selective", "full"], default="none")
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(args.n_embd, args.n_embd, bias=False)
        self.k = nn.Linear(args.n_embd, args.n_embd, bias=False)
        self.v = nn.Linear(args.n_embd, args.n_embd, bias=False)
        self.proj = nn.Linear(args.n_embd, args.n_embd, bias=False)
        mask = torch.ones(args.seq_len, args.seq_len, dtype=torch.bool).tril()
        self.register_buffer("causal", mask, persistent=False)

    def core(self, q, k, v):
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = scores.masked_fill(~self.causal, float("-inf"))
        return scores.softmax(-1) @ v

    def forward(self, x):
        b, s, _ = x.shape
        # the local heads: column-wise parallel q/k/v hand each rank n_head / tp of them
        q, k, v = (t.view(b, s, -1, args.n_embd // args.n_head).transpose(1, 2)
                   for t in (self.q(x), self.k(x), self.v(x)))
        if args.recompute == "selective":
            y = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            y = self.core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(args.n_embd), nn.LayerNorm(args.n_embd)
        self.attn = Attention()
        self.fc = nn.Linear(args.n_embd, 4 * args.n_embd, bias=False)
        self.out = nn.Linear(4 * args.n_embd, args.n_embd, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(args.vocab_size, args.n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(args.n_layer))
        self.ln_f = nn.LayerNorm(args.n_embd)
        self.lm_head = nn.Linear(args.n_embd, args.vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if args.recompute == "full" else block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


dist.init_process_group("nccl")
world, local_rank = dist.get_world_size(), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = GPT()
if args.tp > 1:
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "proj": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block.attn, mesh["tp"], plan)
        parallelize_module(block, mesh["tp"], {"fc": ColwiseParallel(), "out": RowwiseParallel()})
# foreach=False: the LayerNorm weights stay plain tensors next to DTensor weights
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)

for step in range(args.steps):
    idx = torch.randint(0, args.vocab_size, (args.batch_size, args.seq_len), device="cuda")
    loss = model(idx, torch.roll(idx, -1, dims=1))
    loss.backward()
    if mesh["dp"].size() > 1:
        for p in model.parameters():
            grad = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            dist.all_reduce(grad, group=mesh["dp"].get_group())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
dist.destroy_process_group()
