"""Swapping module classes inside a Megatron layer spec (a ModuleSpec tree), as a stand-in does
where Transformer Engine is absent: attention (attention.py), the linear layers (te_gemm.py)."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, Callable


def swap_in_spec(spec: Any, replacement: Callable[[Any], Any],
                 left: frozenset[str] = frozenset()) -> bool:
    """Every submodule class `value` of the spec for which `replacement(value)` is not None is
    replaced by it (nested specs and lists of specs followed), except under the names in
    `left`; True if one was."""
    found = False
    todo, seen = [spec], {}  # id -> node: a node seen stays alive, so its id is not reused
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        submodules = getattr(node, "submodules", None)
        if submodules is None:
            continue
        for name, value in list(vars(submodules).items()):
            new = None if name in left else replacement(value)
            if new is not None:
                setattr(submodules, name, new)
                found = True
            elif hasattr(value, "submodules"):
                todo.append(value)
            elif isinstance(value, functools.partial) and "submodules" in value.keywords:
                # 0.19's `partial(MLP.as_mlp_submodule, submodules=MLPSubmodules(...))`
                todo.append(SimpleNamespace(submodules=value.keywords["submodules"]))
            elif isinstance(value, (list, tuple)):
                todo.extend(v for v in value if hasattr(v, "submodules"))
    return found


def copy_spec(node: Any) -> Any:
    """A copy of a spec tree that swap_in_spec can change without touching the original: every
    dataclass (ModuleSpec, its submodules) and list along the way copied, classes, functions
    and parameters shared. (copy.deepcopy fails on 0.19's hybrid spec: a closure in it.)"""
    import copy
    import dataclasses

    if isinstance(node, functools.partial) and "submodules" in node.keywords:
        return functools.partial(node.func, *node.args,
                                 **{**node.keywords, "submodules": copy_spec(node.keywords[
                                     "submodules"])})
    if isinstance(node, (list, tuple)):
        return type(node)(copy_spec(v) for v in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        new = copy.copy(node)
        for name, value in vars(node).items():
            object.__setattr__(new, name, copy_spec(value))
        return new
    return node
