"""Results whose size depends on tensor values, on the device: a boolean mask, as token
filtering and loss masking write it."""
import torch

x = torch.empty(1024, 1024, device="cuda")   # 4 MiB
mask = x > 0                                 # 1 MiB
kept = x[mask]                               # at most 1024*1024 floats
print(kept.shape[0])
