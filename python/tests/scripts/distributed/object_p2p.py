"""Objects between ranks, as hand-written pipelines and checkpoint code pass them:
`torchrun --nproc_per_node 2 object_p2p.py [--never-send]`.

Rank 0 sends rank 1 a config dict and an example activation (a bf16 tensor that requires
grad); rank 1 checks what it received and writes it into a buffer of the same shape. With
--never-send rank 0 forgets to send, and rank 1 waits at its recv_object_list.
"""

import argparse
import os

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--never-send", action="store_true")
args = p.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
if dist.get_rank() == 0:
    example = torch.zeros(16, 1024, dtype=torch.bfloat16, device=device, requires_grad=True)
    if not args.never_send:
        dist.send_object_list([{"micro_batch": 16, "hidden": 1024}, example], dst=1)
else:
    received = [None, None]
    dist.recv_object_list(received, src=0)
    config, example = received
    assert config == {"micro_batch": 16, "hidden": 1024}, config
    assert example.shape == (16, 1024) and example.dtype == torch.bfloat16, example
    assert example.requires_grad and example.device.type == device.type, example
    buffer = torch.empty_like(example)
    print(f"received {tuple(example.shape)} {example.dtype}")
dist.destroy_process_group()
