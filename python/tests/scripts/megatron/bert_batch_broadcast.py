"""A BERT batch as Megatron's BERT pretraining script takes it: the dataset's int64 arrays
(collated on the host) broadcast over the tensor-parallel group by megatron.core's
`broadcast_data`, which sends the sizes from the group's first rank and the batch as one flat
buffer. Micro-batch 4, sequence 512, TP over the whole world."""

import os

import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
parallel_state.initialize_model_parallel(tensor_model_parallel_size=dist.get_world_size())

b, s = 4, 512
keys = ["text", "types", "labels", "is_random", "loss_mask", "padding_mask"]
sample = {"text": torch.randint(0, 30592, (b, s)), "types": torch.zeros(b, s, dtype=torch.long),
          "labels": torch.randint(0, 30592, (b, s)), "is_random": torch.zeros(b, dtype=torch.long),
          "loss_mask": torch.ones(b, s, dtype=torch.long),
          "padding_mask": torch.ones(b, s, dtype=torch.long)}
batch = tensor_parallel.broadcast_data(keys, sample, torch.int64)
assert {k: tuple(v.shape) for k, v in batch.items()} == \
    {k: tuple(v.shape) for k, v in sample.items()}, batch
loss_mask = batch["loss_mask"].float()
print("BATCH", sum(v.numel() for v in batch.values()), loss_mask.shape)
