"""FSDP2 training step of a GPT-2-medium-shaped model (Hugging Face transformers), for
benchmarks: `torchrun --nproc_per_node 8 bench/gpt2_medium_fsdp.py`.

24 layers, hidden 1024, 16 heads, vocabulary 50,257 (354.8 M parameters with the tied head),
each block and the root wrapped with `fully_shard`, bf16 compute with fp32 reduction, AdamW,
micro-batch 4 x 1,024 tokens. Under memlens every tensor is fake, so it runs on a laptop.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--seq-len", type=int, default=1024)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
mesh = init_device_mesh("cuda", (dist.get_world_size(),), mesh_dim_names=("dp",))
config = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=args.seq_len,
                    vocab_size=50257)
with torch.device(device):
    model = GPT2LMHeadModel(config)
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.transformer.h:
    fully_shard(block, mesh=mesh, mp_policy=policy)
fully_shard(model, mesh=mesh, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(args.steps):
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
