"""torchtitan's recipe for FP8 with FSDP2: convert the Linears (tensorwise scaling, FP8
all-gather of the weights), shard each block, then after every optimizer step precompute the
weights' scales with one all-reduce. Run with torchrun (memlens: --world-size).
FP8_ALL_GATHER=0: the same FP8 compute with bf16 all-gathers, to compare."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torchao.float8 import (Float8LinearConfig, convert_to_float8_training,
                            precompute_float8_dynamic_scale_for_fsdp)

DIM, TOKENS, LAYERS = 4096, 8192, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, DIM, bias=False)
        self.down = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    with torch.device("meta"):
        model = nn.Sequential(*[Block() for _ in range(LAYERS)])
    fp8 = os.environ.get("FP8_ALL_GATHER", "1") == "1"
    config = Float8LinearConfig(enable_fsdp_float8_all_gather=fp8)
    convert_to_float8_training(model, config=config)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device="cuda")
    for p in model.parameters():
        nn.init.normal_(p, std=0.02)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(2):
        x = torch.randn(TOKENS, DIM, device="cuda", dtype=torch.bfloat16)
        model(x).float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if fp8:
            precompute_float8_dynamic_scale_for_fsdp(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
