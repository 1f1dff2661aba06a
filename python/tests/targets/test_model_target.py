"""A model target traced in this process: the model file's module is in sys.modules while the
snapshot is built (the modules' source positions come from it), and gone after."""

from __future__ import annotations

import sys
from pathlib import Path

from memlens.devices import get_device
from memlens.targets.model import ModelTarget, _module_name, parse_target
from memlens.targets.recipe import load_recipe
from memlens.targets.session import trace_target

FACTORY = Path(__file__).parents[1] / "scripts" / "model_factory.py"


def test_a_model_target_leaves_sys_modules_as_it_found_it():
    file, symbol = parse_target(f"{FACTORY}:Tiny")
    target = ModelTarget(str(file), symbol, load_recipe(file, symbol))
    before = set(sys.modules)
    snap = trace_target(target, get_device("cpu"), iterations=1)
    tiny = next(m for m in snap["modules"] if m["class"] == "Tiny")
    assert tiny["parameter_bytes"] == (16 * 16 + 16) * 4  # Linear(16, 16), float32
    # `class Tiny` is on line 4: found through the module, which was still there
    assert tiny["source"] == {"file": str(FACTORY.resolve()), "line": 4}
    assert _module_name(file) not in before and _module_name(file) not in sys.modules
