"""Trace a model definition: build `file.py:ClassOrFactory` and run training steps from a recipe."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING
from pathlib import Path

from ..errors import Location, MemlensError, StopTracing
from .recipe import Recipe
from .failure import script_error

if TYPE_CHECKING:
    from ..engine.tracer import Tracer

_DTYPES = {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
           "bool"}


@dataclass
class ModelTarget:
    file: str
    symbol: str
    recipe: Recipe

    @property
    def name(self) -> str:
        return self.symbol

    def to_json(self) -> dict:
        return {"kind": "model", "name": self.symbol, "path": self.file, "args": [], "cwd": None}


def parse_target(spec: str) -> tuple[Path, str]:
    """'path/to/file.py:ClassOrFactory' -> (path, name)."""
    file, sep, symbol = spec.rpartition(":")
    if not sep or not file or not symbol.isidentifier():
        raise MemlensError(f"target {spec!r} must look like path/to/file.py:ClassOrFactory")
    path = Path(file)
    if not path.is_file():
        raise MemlensError(f"model file not found: {file}")
    return path.resolve(), symbol


def _module_name(path: Path) -> str:
    return f"memlens_target_{abs(hash(str(path)))}"


def unload(target: ModelTarget) -> None:
    """Remove the module `run_model` put in sys.modules, once the snapshot is built (it finds
    the model classes' source files through it)."""
    sys.modules.pop(_module_name(Path(target.file)), None)


def _load_module(path: Path):
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise MemlensError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def run_model(target: ModelTarget, tracer: Tracer, device_type: str) -> bool:
    """Build the model and run `recipe.iterations` training steps under `tracer`."""
    import torch

    recipe = target.recipe
    path = Path(target.file)
    saved_path = sys.path[:]
    saved_dtype = torch.get_default_dtype()
    try:
        with tracer:
            try:
                module = _load_module(path)
                factory = getattr(module, target.symbol, None)
                if factory is None or not callable(factory):
                    names = sorted(n for n, v in vars(module).items()
                                   if isinstance(v, type) and issubclass(v, torch.nn.Module)
                                   and v.__module__ == module.__name__)
                    raise MemlensError(f"{path.name} has no class or factory named "
                                       f"{target.symbol!r}; modules defined there: "
                                       f"{', '.join(names) or 'none'}", Location(str(path), 1))
                _train(factory, recipe, device_type, str(path), target.symbol, tracer)
            except (MemlensError, StopTracing):
                raise
            except Exception as e:
                raise script_error(e, f"{path.name}:{target.symbol}") from None
    except StopTracing:
        return True
    finally:
        sys.path[:] = saved_path
        torch.set_default_dtype(saved_dtype)
    return False


def _train(factory, recipe: Recipe, device_type: str, path: str, symbol: str,
           tracer: Tracer) -> None:
    import torch

    param_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(recipe.precision)
    autocast_dtype = {"autocast-bf16": torch.bfloat16,
                      "autocast-fp16": torch.float16}.get(recipe.precision)
    device = torch.device(device_type)
    with torch.device(device):
        if param_dtype is not None:
            torch.set_default_dtype(param_dtype)
        model = factory(**recipe.init)
        torch.set_default_dtype(torch.float32)
    if not isinstance(model, torch.nn.Module):
        raise MemlensError(f"{symbol} returned {type(model).__name__}, not a torch.nn.Module",
                           Location(path, 1))
    optimizer = _optimizer(model, recipe)
    iterations = recipe.iterations or 2
    for _ in range(iterations):
        args, kwargs = _inputs(recipe, device, param_dtype)
        ctx = (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype
               else contextlib.nullcontext())
        with ctx:
            output = model(*args, **kwargs)
            loss = _loss(output, recipe)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    tracer.mark_end()  # before the model and optimizer are released


def _optimizer(model, recipe: Recipe):
    import torch

    name = str(recipe.optimizer).lower()
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "none" or not params:
        return None
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}[name]
    try:
        return cls(params, lr=recipe.lr, **recipe.optimizer_args)
    except TypeError as e:
        raise MemlensError(f"optimizer_args for {name}: {e}", Location(recipe.source or "", 0))


def _inputs(recipe: Recipe, device, float_dtype):
    import torch

    def make(spec):
        shape = recipe.input_shape(spec)
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            if float_dtype is not None and dtype == torch.float32:
                dtype = float_dtype
            return torch.randn(shape, dtype=dtype, device=device)
        if dtype == torch.bool:
            return torch.ones(shape, dtype=dtype, device=device)
        return torch.randint(spec.low, max(spec.high, spec.low + 1), shape, dtype=dtype,
                             device=device)

    if isinstance(recipe.inputs, list):
        return [make(s) for s in recipe.inputs], {}
    return [], {name: make(s) for name, s in recipe.inputs.items()}


def _first_tensor(output):
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for item in output:
            t = _first_tensor(item)
            if t is not None:
                return t
    return None


def _loss(output, recipe: Recipe):
    import torch

    how = recipe.loss
    if how.startswith("output."):
        value = getattr(output, how[len("output."):], None)
        if not isinstance(value, torch.Tensor):
            raise MemlensError(f"loss {how!r}: the model's output has no tensor attribute "
                               f"{how[len('output.'):]!r}", Location(recipe.source or "", 0))
        return value
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    t = _first_tensor(output)
    if t is None:
        raise MemlensError("the model's output holds no tensor to compute a loss from",
                           Location(recipe.source or "", 0))
    if how == "mean":
        return t.float().mean() if not t.is_floating_point() else t.mean()
    if how != "sum":
        raise MemlensError(f"unknown loss {how!r}; use sum, mean or output.<attribute>",
                           Location(recipe.source or "", 0))
    return t.sum()
