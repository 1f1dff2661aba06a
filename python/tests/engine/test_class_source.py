"""A class's file and first line from one parse of its file (engine/class_source.py), the
same as `inspect.getsourcelines` says, for every kind of class definition."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
import transformers
from torch import nn

from memlens.engine.class_source import class_source


def _decorated(cls):
    return cls


@_decorated
@dataclasses.dataclass
class Decorated:
    x: int = 0


def _decorated_with(*_args):
    return _decorated


@_decorated_with(
    "a decorator over two lines")
class SpreadDecorator:
    pass


class Twice:  # defined twice: inspect answers the first definition's line
    pass


class Twice:  # noqa: F811
    pass


class Outer:
    class Inner(nn.Module):
        pass


def factory():
    class Local(nn.Module):
        pass

    return Local


def _inspect(cls):
    return inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1]


def test_the_same_file_and_line_as_inspect():
    classes = [Decorated, SpreadDecorator, Twice, Outer, Outer.Inner, factory(), transformers.LlamaForCausalLM,
               transformers.models.llama.modeling_llama.LlamaDecoderLayer,
               transformers.models.llama.modeling_llama.LlamaRMSNorm,
               transformers.GPT2LMHeadModel]
    classes += [c for c in vars(torch.nn).values()
                if isinstance(c, type) and issubclass(c, nn.Module)]
    assert len(classes) > 100
    for cls in classes:
        assert class_source(cls) == _inspect(cls), cls


def test_classes_without_source_have_none():
    made = type("Made", (nn.Module,), {})  # no definition in its module's file
    with pytest.raises(OSError):
        inspect.getsourcelines(made)
    assert class_source(made) is None
    assert class_source(int) is None  # built in: no source file
