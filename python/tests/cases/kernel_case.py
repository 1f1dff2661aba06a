"""A tiny training step around the CPU kernels whose own buffers the workspace rules model.

    python kernel_case.py --net "conv(3, 20, 3, stride=2, padding=1) bn(20) relu" \
        --input 4,3,17,17 [--dtype bf16] [--input-grad] [--iterations 2]

--net is a space-separated list of layers: conv, conv1d, bn, bn1d, ln, linear, relu, flatten,
with nn constructor arguments; gram (x @ x^T over the last two dims, a bmm for 3-d inputs) and
sdpa(heads) (causal self-attention of a (batch, length, dim) input, no projections). The loss
is the mean square of the output.
"""

import argparse
import re

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--net", required=True)
p.add_argument("--input", required=True)
p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
p.add_argument("--input-grad", action="store_true")
p.add_argument("--channels-last", action="store_true")
p.add_argument("--iterations", type=int, default=2)
args = p.parse_args()
torch.manual_seed(0)
dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32


class Gram(nn.Module):
    def forward(self, x):
        return x @ x.transpose(-1, -2)


class SelfAttention(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, x):
        b, s, d = x.shape
        q = x.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return y.transpose(1, 2).reshape(b, s, d)


LAYERS = {"conv": nn.Conv2d, "conv1d": nn.Conv1d, "bn": nn.BatchNorm2d, "bn1d": nn.BatchNorm1d,
          "ln": nn.LayerNorm, "linear": nn.Linear, "relu": nn.ReLU, "flatten": nn.Flatten,
          "gram": Gram, "sdpa": SelfAttention}


def layer(spec: str) -> nn.Module:
    name, _, rest = spec.partition("(")
    return eval(f"LAYERS[{name!r}]({rest or ')'}", {"LAYERS": LAYERS})


specs = re.findall(r"\w+(?:\([^)]*\))?", args.net)
model = nn.Sequential(*[layer(s) for s in specs]).to(dtype)
if args.channels_last:
    model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
shape = [int(n) for n in args.input.split(",")]

for step in range(args.iterations):
    x = torch.randn(*shape, dtype=dtype)
    if args.channels_last:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_(args.input_grad)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
