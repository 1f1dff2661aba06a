"""Two bf16 Linear layers of 4096 x 4096 trained in FP8 with torchao, 8192 tokens a step.

    python mlp_float8.py tensorwise|rowwise [--force-recompute]
"""
import argparse

import torch
import torch.nn as nn
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

parser = argparse.ArgumentParser()
parser.add_argument("recipe", choices=["tensorwise", "rowwise"])
parser.add_argument("--force-recompute", action="store_true")
args = parser.parse_args()

model = nn.Sequential(nn.Linear(4096, 4096, bias=False), nn.Linear(4096, 4096, bias=False))
model = model.to("cuda", torch.bfloat16)
config = Float8LinearConfig.from_recipe_name(args.recipe)
if args.force_recompute:
    config = Float8LinearConfig(**{**config.__dict__, "force_recompute_fp8_weight_in_bwd": True})
convert_to_float8_training(model, config=config)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

for step in range(2):
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
