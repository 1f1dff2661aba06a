"""What a simulated rank sees: `torchrun --nproc_per_node 4 --nnodes 2 env_probe.py REPORT`.

Writes a JSON report of its environment and of the process groups, device meshes and
collectives it used, then runs one tiny training step."""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

report = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")}
report.update({k: v for k, v in os.environ.items() if k.startswith("PROBE_")})
report["argv"] = sys.argv[2:]
report["cwd"] = os.getcwd()
dist.init_process_group(backend="nccl")  # whatever the machine, the trace makes it fake
world, rank = dist.get_world_size(), dist.get_rank()
cuda = torch.cuda.is_available()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
evens = dist.new_group([r for r in range(world) if r % 2 == 0], backend="nccl")
mesh = init_device_mesh(device.type, (2, world // 2), mesh_dim_names=("dp", "tp"))
report.update(world=world, rank=rank, in_evens=dist.get_rank(evens) if rank % 2 == 0 else -1,
              mesh=mesh.mesh.tolist(), coordinate=mesh.get_coordinate(),
              tp_rank=mesh.get_local_rank("tp"), tp_size=mesh["tp"].size(),
              dp_group_size=dist.get_world_size(mesh.get_group("dp")))

x = torch.ones(1024, device=device)  # 4 KiB
gathered = funcol.all_gather_tensor(x, 0, mesh["tp"])  # a new tensor: tp_size x 4 KiB
report["gathered_shape"] = list(gathered.shape)
dist.all_reduce(x)
dist.broadcast(x, src=0)
dist.barrier()
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank})
report["objects"] = objects
with open(sys.argv[1], "w") as f:
    json.dump(report, f)

model = torch.nn.Linear(64, 64, device=device)
model(torch.randn(8, 64, device=device)).sum().backward()
dist.destroy_process_group()
