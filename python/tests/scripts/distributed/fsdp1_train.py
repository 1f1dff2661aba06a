"""FSDP1 (FullyShardedDataParallel) training script: `torchrun --nproc_per_node 8 fsdp1_train.py
[--offload]`.

Same model as fsdp2_train.py (520,704 parameters); each block and the root are wrapped. FSDP1
flattens each wrapped module's parameters into one FlatParameter and pads it to a multiple of
the world size, so every rank holds the same number of elements. --offload: CPUOffload(
offload_params=True) on a model built on the GPU (FSDP moves each flat parameter to the host,
as with a QLoRA model that bitsandbytes quantized on the GPU).
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp2_train import Block, Model, batch

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if cuda:
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
with torch.device(device):
    model = Model()
model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
             device_id=device if cuda else None,
             cpu_offload=CPUOffload(offload_params="--offload" in sys.argv))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(5):
    x, y = batch(device)
    F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
