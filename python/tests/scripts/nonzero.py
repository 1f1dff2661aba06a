import torch

scores = torch.randn(128)
keep = scores[scores > 0]
