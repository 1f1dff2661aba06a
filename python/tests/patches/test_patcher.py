"""One patch discipline: every patch through the Patcher, undone on exit, version-checked against
one table; a tracer that fails half-way into its set-up undoes what it had applied."""

from __future__ import annotations

import types
import warnings

import pytest

from memlens.patches.patcher import TESTED_VERSIONS, Patcher, check_tested


def _modules():
    home = types.ModuleType("home")
    home.f = lambda: "original"
    user = types.ModuleType("user")  # ran `from home import f`, and `from home import f as g`
    user.f = user.g = home.f
    return home, user


def test_replace_everywhere_replaces_every_binding_and_undoes_late_ones():
    home, user = _modules()
    original = home.f
    late = types.ModuleType("late")
    patcher = Patcher()
    new = lambda: "new"  # noqa: E731
    assert patcher.replace_everywhere(home, "f", new, lambda: [user, late]) is original
    assert home.f is new and user.f is new and user.g is new
    late.h = home.f  # bound while the patch is in place
    patcher.undo()
    assert home.f is original and user.f is original and user.g is original
    assert late.h is original


def test_set_everywhere_replaces_only_the_same_name():
    home, user = _modules()
    original = home.f
    patcher = Patcher()
    patcher.set_everywhere([home, user], "f", "new")
    assert (home.f, user.f, user.g) == ("new", "new", original)
    patcher.undo()
    assert (home.f, user.f) == (original, original)


def test_a_swap_holds_for_one_block_even_when_it_raises():
    home, _ = _modules()
    original = home.f
    with pytest.raises(ValueError):
        with Patcher.swapped(home, "f", "swapped"):
            assert home.f == "swapped"
            raise ValueError
    assert home.f is original


def test_one_table_of_tested_versions():
    library, low, high = TESTED_VERSIONS["torch_core"]
    assert library == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_tested("torch_core", low)  # the lowest tested version: no warning
    with pytest.warns(UserWarning, match=rf"torch {high} is outside the tested range "
                                         rf"\[{low}, {high}\)"):
        check_tested("torch_core", high)  # the first untested one


def test_a_tracer_that_fails_half_way_into_its_set_up_undoes_what_it_applied(monkeypatch):
    import torch
    from torch.nn.modules import module as m

    from memlens import Tracer

    swap_tensors = torch.utils.swap_tensors  # patched by patches/torch_core.py, first of all
    forward_hooks = len(m._global_forward_pre_hooks)  # the module tracker adds one

    def broken_install():
        raise OSError("the plugin host cannot start")

    tracer = Tracer("cpu")
    monkeypatch.setattr(tracer.plugins, "install", broken_install)  # after patches and hooks
    with pytest.raises(OSError):
        tracer.__enter__()
    assert torch.utils.swap_tensors is swap_tensors
    assert len(m._global_forward_pre_hooks) == forward_hooks
    with Tracer("cpu"):  # and the next trace starts clean
        torch.ones(256)
    assert torch.utils.swap_tensors is swap_tensors
