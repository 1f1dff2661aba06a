import torch

model = torch.nn.Linear(8, 8)


def broken_step():
    raise ValueError("the learning rate schedule is empty")


broken_step()
