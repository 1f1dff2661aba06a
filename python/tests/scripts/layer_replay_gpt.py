"""A GPT of N identical pre-norm blocks trained with AdamW, in the style of nanoGPT, with the
variations a layer replay must get right or refuse (tests/engine/test_layer_replay.py):

    --checkpoint          each block under torch.utils.checkpoint (non-reentrant)
    --accumulate K        K micro-batches per step (the second finds gradients to add to)
    --evaluate            a forward under torch.no_grad() after each step
    --branch-every K      every K-th block also scales its input: blocks differ by their index
    --keep-graph          one forward whose graph is dropped without a backward, first
    --grad-of-params      gradients by torch.autograd.grad instead of backward()
    --autocast            fp32 weights, forward under torch.autocast(bfloat16)
    --math-attention K    every K-th micro-batch under sdpa_kernel(MATH), from the same line:
                          attention keeps its scores
    --dropout-off S       dropout (0.1) after each block's MLP, set to 0 on every block from
                          step S on (as a schedule would): no more masks
    --host-scale          each block scales its MLP output by `torch.tensor([1.0])[0]`, a
                          host constant (as Megatron's fused softmax passes its scale)
    --workspace-from S    each block's MLP activation's backward takes a workspace of 256
                          rows, 64 from step S on: the same forward, another backward (as a
                          kernel Dynamo recompiled between steps splits its reduction anew)
"""

import argparse
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--dim", type=int, default=256)
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--vocab", type=int, default=1000)
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--checkpoint", action="store_true")
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--evaluate", action="store_true")
parser.add_argument("--branch-every", type=int, default=0)
parser.add_argument("--keep-graph", action="store_true")
parser.add_argument("--grad-of-params", action="store_true")
parser.add_argument("--autocast", action="store_true")
parser.add_argument("--math-attention", type=int, default=0)
parser.add_argument("--dropout-off", type=int, default=None)
parser.add_argument("--workspace-from", type=int, default=None)
parser.add_argument("--host-scale", action="store_true")
args = parser.parse_args()
workspace_rows = 256


class GeluWithWorkspace(torch.autograd.Function):
    """GELU whose backward takes a temporary workspace of `workspace_rows` x dim fp32."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        workspace = torch.empty(workspace_rows, args.dim, device=x.device)
        del workspace
        return torch.ops.aten.gelu_backward(grad, x)


def gelu(x):
    return F.gelu(x) if args.workspace_from is None else GeluWithWorkspace.apply(x)


class Block(nn.Module):
    def __init__(self, index: int):
        super().__init__()
        self.index = index
        self.ln_1 = nn.LayerNorm(args.dim)
        self.attn = nn.Linear(args.dim, 3 * args.dim)
        self.proj = nn.Linear(args.dim, args.dim)
        self.ln_2 = nn.LayerNorm(args.dim)
        self.fc = nn.Linear(args.dim, 4 * args.dim)
        self.out = nn.Linear(4 * args.dim, args.dim)
        self.drop = nn.Dropout(0.1) if args.dropout_off is not None else nn.Identity()

    def forward(self, x):
        if args.branch_every and self.index % args.branch_every == args.branch_every - 1:
            x = x * 0.5
        b, t, d = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, args.heads, d // args.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        mlp = self.drop(self.out(gelu(self.fc(self.ln_2(x)))))
        if args.host_scale:
            mlp = mlp * torch.tensor([1.0])[0]
        return x + mlp


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(args.vocab, args.dim)
        self.h = nn.ModuleList(Block(i) for i in range(args.layers))
        self.ln_f = nn.LayerNorm(args.dim)
        self.lm_head = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for block in self.h:
            if args.checkpoint and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, args.vocab), targets.reshape(-1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)


def autocast():
    if not args.autocast:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


def attention(n: int):
    if not args.math_attention or n % args.math_attention:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def batch():
    idx = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=device)
    return idx[:, :-1], idx[:, 1:]


if args.keep_graph:
    dropped = model(*batch())  # a forward whose graph is let go without a backward
    del dropped

for step in range(args.steps):
    if step == args.workspace_from:
        workspace_rows = 64
    if step == args.dropout_off:
        for block in model.h:
            block.drop.p = 0.0
    for micro in range(args.accumulate):
        with autocast(), attention(step * args.accumulate + micro + 1):
            loss = model(*batch()) / args.accumulate
        if args.grad_of_params:
            params = [p for p in model.parameters()]
            for p, g in zip(params, torch.autograd.grad(loss, params)):
                p.grad = g if p.grad is None else p.grad + g
        else:
            loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if args.evaluate:
        model.eval()
        with torch.no_grad(), autocast():
            model(*batch())
        model.train()
