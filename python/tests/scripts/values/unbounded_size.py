"""A result whose size has no bound a trace can know: repeats read from a device tensor."""
import torch

weights = torch.randn(4096, 4096, device="cuda")
repeats = torch.randint(1, 4, (4096,), device="cuda")
expanded = torch.repeat_interleave(weights, repeats, dim=0)
