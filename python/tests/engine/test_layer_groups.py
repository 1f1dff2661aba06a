"""Which attributes of a group's blocks differ (engine/layer_groups.py): a layer replayed from
another's recording may read none of them."""

import torch
from torch import nn

from memlens.engine.layer_groups import differing_attributes


class Stateless(nn.Module):
    """A helper each block holds its own of, with no state: the `kernels` package's wrapper of
    a function, as transformers >= 5.25 gives every attention layer one."""

    def forward(self, x):
        return x * 2


class Block(nn.Module):
    def __init__(self, index: int, cached=None) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layer_idx = index
        self.helpers = {"rotary": Stateless()}  # a plain attribute, not a submodule
        self.scale = [1.0, {"mode": "same"}]
        if cached is not None:
            self.cached = {"table": cached}


def test_helpers_of_one_class_without_state_are_alike_and_an_index_is_not():
    blocks = [Block(i) for i in range(4)]
    assert differing_attributes(blocks) == {(Block, "layer_idx")}


def test_helpers_that_hold_tensors_or_other_values_differ():
    blocks = [Block(i, cached=torch.zeros(2)) for i in range(3)]
    assert (Block, "cached") in differing_attributes(blocks)
    blocks = [Block(0), Block(1)]
    blocks[1].helpers["rotary"].factor = 3  # the same class, state of its own
    blocks[1].scale = [1.0, {"mode": "other"}]
    assert differing_attributes(blocks) >= {(Block, "helpers"), (Block, "scale")}
