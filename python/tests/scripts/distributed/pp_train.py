"""Pipeline parallelism with torch.distributed.pipelining:
`torchrun --nproc_per_node 4 pp_train.py [--schedule 1f1b|gpipe] [--microbatches 8]
[--infer-shapes]`.

Each rank holds one stage of two blocks Linear(512, 512) + ReLU; the last stage also a head
Linear(512, 512) and the loss. The schedule decides how many micro-batches' activations a stage
holds at once: with 1F1B stage s keeps up to (stages - s) in flight, with GPipe every stage keeps
all of them until the backward passes start. With --infer-shapes the stages are built as
torchtitan builds them, without example inputs: each learns its input shapes at the first step
from the previous stage (send_object_list/recv_object_list).
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

HIDDEN, BATCH = 512, 64

p = argparse.ArgumentParser()
p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
p.add_argument("--microbatches", type=int, default=8)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--infer-shapes", action="store_true")
args = p.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
rank, stages = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
if cuda:
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

layers = [nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU()]
if rank == stages - 1:
    layers.append(nn.Linear(HIDDEN, HIDDEN))
with torch.device(device):
    stage_module = nn.Sequential(*layers).to(device)
micro = BATCH // args.microbatches
# Shapes given up front (no run-time shape inference between stages): the received input
# of a later stage and every stage's output carry gradients.
example_in = torch.empty(micro, HIDDEN, device=device, requires_grad=rank > 0)
example_out = torch.empty(micro, HIDDEN, device=device, requires_grad=True)
if args.infer_shapes:
    stage = PipelineStage(stage_module, rank, stages, device)
else:
    stage = PipelineStage(stage_module, rank, stages, device, input_args=(example_in,),
                          output_args=(example_out,))
schedule_class = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
schedule = schedule_class(stage, args.microbatches, loss_fn=F.mse_loss)
optimizer = torch.optim.AdamW(stage_module.parameters(), lr=1e-3)
for _ in range(args.steps):
    x = torch.randn(BATCH, HIDDEN, device=device)
    y = torch.randn(BATCH, HIDDEN, device=device)
    if rank == 0:
        schedule.step(x)
    elif rank == stages - 1:
        losses = []
        schedule.step(target=y, losses=losses)
    else:
        schedule.step()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
