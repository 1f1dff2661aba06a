import torch

x = torch.randn(4, 16)
lengths = torch.randint(1, 16, (4,))
longest = int(lengths.max().item())
y = x[:, :longest]
