"""A tiny trainer that the launch scripts beside it start: an MLP of `--num-layers` blocks
(Linear(H, F), GELU, Linear(F, H), with biases), AdamW, a few steps. Writes a JSON report of
what it was given -- its arguments, working directory, environment and process group -- to
`--report` before it trains.

Parameters: num_layers x (H*F + F + F*H + H), float32."""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

SEEN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_DEVICE_MAX_CONNECTIONS",
        "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "LAUNCH_STYLE")
PREFIXES = ("NCCL_", "ACCELERATE_")

parser = argparse.ArgumentParser()
parser.add_argument("--num-layers", type=int, default=2)
parser.add_argument("--hidden-size", type=int, default=64)
parser.add_argument("--ffn-hidden-size", type=int, default=None)
parser.add_argument("--micro-batch-size", type=int, default=4)
parser.add_argument("--global-batch-size", type=int, default=None)
parser.add_argument("--train-iters", type=int, default=10)
parser.add_argument("--save", default=None)
parser.add_argument("--report", required=True)
parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
args = parser.parse_args()

distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("nccl")
report = {k: os.environ.get(k) for k in SEEN}
report.update({k: v for k, v in os.environ.items() if k.startswith(PREFIXES)})
report.update(argv=sys.argv[1:], cwd=os.getcwd(), local_rank_arg=args.local_rank,
              world=dist.get_world_size() if distributed else 1)
path = args.report.replace("{rank}", os.environ.get("RANK", "0"))
with open(path, "w") as f:
    json.dump(report, f)

device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
    if torch.cuda.is_available() else torch.device("cpu")
hidden, ffn = args.hidden_size, args.ffn_hidden_size or 4 * args.hidden_size
model = nn.Sequential(*[nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
                        for _ in range(args.num_layers)]).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.train_iters):
    x = torch.randn(args.micro_batch_size, hidden, device=device)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
if distributed:
    dist.destroy_process_group()
