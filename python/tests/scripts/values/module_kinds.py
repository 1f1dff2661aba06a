"""Model state made in every kind of nn.Module.__init__ (a module-level class, a nested one, one
defined in a function) is fake; host tensors made outside them are real."""
import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor


class Outer:
    class Inner(nn.Module):  # a nested class
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(1024, 1024))


def make_local():
    class Local(nn.Module):  # a class defined in a function
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(1024, 1024))
    return Local()


made = [nn.Linear(1024, 1024).weight, Outer.Inner().w, make_local().w]
assert all(isinstance(p, FakeTensor) for p in made), "model state made for real"
assert not isinstance(torch.randn(4), FakeTensor), "a host tensor made fake"
del made



def train():
    for step in range(3):
        x = torch.empty(256, 1024, device="cuda")  # 1 MiB on the device
        torch.zeros(4)  # a host factory op, made for real
        del x  # freed here, so one MiB at a time


train()
