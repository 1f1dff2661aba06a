"""Fake tensors read back through numpy and written by torch.save (patches/torch_values.py), and
the import watcher the library plugins hang on (plugins/imports.py)."""

import importlib
import importlib.util
import io
import sys

import numpy as np
import pytest
import torch
from torch import nn

from memlens import Tracer
from memlens.plugins.imports import ImportWatcher


def test_numpy_of_a_fake_tensor_is_zeros_of_its_shape_with_a_note():
    with Tracer("cpu") as tracer:
        layer = nn.Linear(16, 8)  # its parameters are fake
        weight = layer.weight.detach()
        array = weight.numpy()
        as_array = np.asarray(layer.bias.detach())
        with pytest.raises(RuntimeError, match="requires grad"):
            layer.weight.numpy()  # what a real tensor refuses is still refused
        with pytest.raises(TypeError, match="(?i)unsupported ScalarType bfloat16"):
            weight.to(torch.bfloat16).numpy()
    assert (array.shape, array.dtype, array.any()) == ((8, 16), np.float32, False)
    assert (as_array.shape, as_array.dtype) == ((8,), np.float32)
    notes = [p for p in tracer.accountant.placeholders if p[1] == "numpy"]
    assert len(notes) == 2  # one per line


def test_torch_save_of_fake_tensors_writes_meta_tensors():
    buffer = io.BytesIO()
    with Tracer("cpu"):
        layer = nn.Linear(16, 8)
        optimizer = torch.optim.AdamW(layer.parameters())
        layer(torch.randn(4, 16)).sum().backward()
        optimizer.step()
        torch.save({"model": layer.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": 3}, buffer)
    # 16 x 8 weights: a real tensor's data alone would be 512 bytes, both moments 1 KiB more.
    loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    weight = loaded["model"]["weight"]
    assert (weight.device.type, weight.shape, weight.dtype) == ("meta", (8, 16), torch.float32)
    state = loaded["optimizer"]["state"][0]
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        "step": (), "exp_avg": (8, 16), "exp_avg_sq": (8, 16)}
    assert loaded["epoch"] == 3


def test_a_probe_for_a_module_leaves_its_callbacks_for_the_import(tmp_path, monkeypatch):
    # transformers asks importlib.util.find_spec("accelerate") to learn what is installed,
    # long before it imports accelerate: the plugin's callback must still run at the import.
    (tmp_path / "probed_library.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    watcher = ImportWatcher()
    watcher.install()
    try:
        watcher.watch_start("probed_library", lambda m: seen.append(("start", hasattr(m, "VALUE"))))
        watcher.watch("probed_library", lambda m: seen.append(("done", m.VALUE)))
        assert importlib.util.find_spec("probed_library") is not None
        assert seen == []
        importlib.import_module("probed_library")
        assert seen == [("start", False), ("done", 1)]
    finally:
        watcher.uninstall()
        sys.modules.pop("probed_library", None)
