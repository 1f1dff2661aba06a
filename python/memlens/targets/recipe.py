"""Recipes: how to run one training step of a model definition.

Read from `[tool.memlens]` in the nearest `pyproject.toml`, or from a `memlens.toml` (same keys,
without the `tool.memlens` prefix), searching upwards from the model file. Top-level keys are
defaults; each `[[tool.memlens.model]]` entry names a target `file.py:ClassOrFactory` (relative
to the recipe file) and may override any default. See the README for a full example.
"""

from __future__ import annotations

import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Location, MemlensError

PRECISIONS = ("fp32", "bf16", "fp16", "autocast-bf16", "autocast-fp16")
OPTIMIZERS = ("adamw", "adam", "sgd", "none")
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
          "bool")
# Each key's TOML type (inputs are checked on their own).
_TYPES: dict[str, tuple[type, ...]] = {
    "target": (str,), "device": (str,), "iterations": (int,), "precision": (str,),
    "optimizer": (str,), "optimizer_args": (dict,), "lr": (int, float), "loss": (str,),
    "batch": (int,), "init": (dict,), "budget": (str,), "sdpa_backend": (str,)}
_KEYS = {*_TYPES, "inputs"}


@dataclass
class InputSpec:
    shape: list[int | str]
    dtype: str = "float32"
    low: int = 0
    high: int = 2  # exclusive upper bound for integer inputs (token ids: the vocabulary size)


@dataclass
class Recipe:
    target: str | None = None
    device: str | None = None
    iterations: int | None = None
    precision: str = "fp32"
    optimizer: str = "adamw"
    optimizer_args: dict[str, Any] = field(default_factory=dict)
    lr: float = 1e-3
    loss: str = "sum"
    batch: int = 1
    init: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, InputSpec] | list[InputSpec] = field(default_factory=dict)
    budget: str | None = None
    sdpa_backend: str | None = None  # the attention kernel tried first (cuda/sdpa.py)
    source: str | None = None  # the file the recipe came from

    def input_shape(self, spec: InputSpec) -> list[int]:
        out = []
        for dim in spec.shape:
            if dim == "batch":
                out.append(self.batch)
            elif isinstance(dim, int) and dim >= 0:
                out.append(dim)
            else:
                raise MemlensError(f"input dimension {dim!r} must be a non-negative integer or "
                                   "\"batch\"", self._where())
        return out

    def _where(self) -> Location | None:
        return Location(self.source, key_line(self.source, "inputs")) if self.source else None


def _input_spec(name: str, raw: Any, source: str, where: Location) -> InputSpec:
    if not isinstance(raw, dict) or "shape" not in raw:
        raise MemlensError(f"input {name!r} needs a table with a `shape`, e.g. "
                           f"{{ shape = [\"batch\", 1024], dtype = \"int64\", high = 50257 }}", where)
    shape = raw["shape"]
    if not isinstance(shape, list) or not all(
            (isinstance(d, int) and not isinstance(d, bool) and d >= 0) or d == "batch"
            for d in shape):
        raise MemlensError(f"input {name!r}: shape must be a list of non-negative integers or "
                           f"\"batch\", got {shape!r}", where)
    dtype = raw.get("dtype", "float32")
    if dtype not in DTYPES:
        raise MemlensError(f"input {name!r}: unknown dtype {dtype!r}; one of {', '.join(DTYPES)}",
                           where)
    unknown = set(raw) - {"shape", "dtype", "low", "high"}
    if unknown:
        raise MemlensError(f"input {name!r}: unknown key(s) {', '.join(sorted(unknown))}", where)
    return InputSpec(shape, dtype, int(raw.get("low", 0)), int(raw.get("high", 2)))


def key_line(source: str | None, key: str, after: int = 0) -> int:
    """The line of `key = ...` in the recipe file at or after line `after` (tomllib keeps no
    positions; 0 when the key is not found, e.g. a CLI override)."""
    if not source:
        return 0
    try:
        lines = Path(source).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    pattern = re.compile(rf'^\s*["\']?{re.escape(key)}["\']?\s*=')
    for number, text in enumerate(lines[max(0, after - 1):], start=max(1, after)):
        if pattern.match(text):
            return number
    return 0


def _entry_line(source: str, raw: dict[str, Any]) -> int:
    """Where a [[model]] entry starts: its `target = ...` line (0 for the top-level table)."""
    target = raw.get("target")
    if not isinstance(target, str) or not source:
        return 0
    try:
        lines = Path(source).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    for number, text in enumerate(lines, start=1):
        if target in text and re.match(r'^\s*["\']?target["\']?\s*=', text):
            return number
    return 0


def _apply(recipe: Recipe, raw: dict[str, Any], source: str) -> None:
    start = _entry_line(source, raw)

    def where(key: str | None = None) -> Location:
        return Location(source, key_line(source, key, start) if key else start)

    unknown = set(raw) - _KEYS - {"model"}
    if unknown:
        first = sorted(unknown)[0]
        raise MemlensError(f"unknown recipe key(s): {', '.join(sorted(unknown))}; known: "
                           f"{', '.join(sorted(_KEYS))}", where(first))
    for key, value in raw.items():
        if key == "model":
            continue
        if key == "inputs":
            at = where("inputs")
            if isinstance(value, dict):
                recipe.inputs = {k: _input_spec(k, v, source, at) for k, v in value.items()}
            elif isinstance(value, list):
                recipe.inputs = [_input_spec(str(i), v, source, at) for i, v in enumerate(value)]
            else:
                raise MemlensError("`inputs` must be a table (keyword inputs) or an array "
                                   "(positional inputs)", at)
        else:
            if not isinstance(value, _TYPES[key]) or isinstance(value, bool):
                kind = " or ".join(t.__name__ for t in _TYPES[key])
                raise MemlensError(f"recipe key {key!r} must be {kind}, got {value!r}", where(key))
            setattr(recipe, key, value)
    check_values(recipe, where)


def check_values(recipe: Recipe, where=None, names: dict[str, str] | None = None) -> None:
    """The value rules of every key, for the recipe file's keys and the CLI's overrides alike.
    `where(key)` places an error; `names` maps a key to what the user wrote (`--batch`)."""
    names = names or {}

    def fail(key: str, message: str):
        label = names.get(key, f"recipe key {key!r}")
        raise MemlensError(f"{label}: {message}", where(key) if where else None)

    if recipe.precision not in PRECISIONS:
        fail("precision", f"unknown precision {recipe.precision!r}; one of {', '.join(PRECISIONS)}")
    if str(recipe.optimizer).lower() not in OPTIMIZERS:
        fail("optimizer", f"unknown optimizer {recipe.optimizer!r}; one of "
             f"{', '.join(OPTIMIZERS)}")
    if not isinstance(recipe.batch, int) or recipe.batch < 1:
        fail("batch", f"batch must be a positive integer, got {recipe.batch!r}")
    if recipe.iterations is not None and recipe.iterations < 1:
        fail("iterations", f"iterations must be at least 1, got {recipe.iterations!r}")
    if recipe.device is not None:
        from ..devices import get_device

        try:
            get_device(recipe.device)
        except MemlensError as e:
            fail("device", e.message)
    if recipe.sdpa_backend not in (None, *SDPA_BACKENDS):
        fail("sdpa_backend", f"unknown SDPA backend {recipe.sdpa_backend!r}; one of "
             f"{', '.join(SDPA_BACKENDS)}")
    if recipe.budget is not None:
        from ..units import parse_bytes

        try:
            parse_bytes(recipe.budget)
        except ValueError as e:
            fail("budget", str(e))
    if recipe.loss not in ("sum", "mean") and not recipe.loss.startswith("output."):
        fail("loss", f"unknown loss {recipe.loss!r}; use sum, mean or output.<attribute>")


def _memlens_table(data: Any, f: Path) -> dict[str, Any]:
    if not isinstance(data, dict):
        table = "[tool.memlens]" if f.name == "pyproject.toml" else "the recipe"
        raise MemlensError(f"{table} must be a table of recipe keys, got {data!r}",
                           Location(str(f), key_line(str(f), "memlens") or 1))
    return data


def find_recipe_file(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest memlens.toml, or pyproject.toml with a [tool.memlens] table."""
    for folder in [start, *start.parents]:
        for name in ("memlens.toml", "pyproject.toml"):
            f = folder / name
            if not f.is_file():
                continue
            try:
                data = tomllib.loads(f.read_text())
            except tomllib.TOMLDecodeError as e:
                raise MemlensError(f"cannot read recipe: {e}", Location(str(f), 0)) from None
            if name == "pyproject.toml":
                data = data.get("tool", {}).get("memlens")
                if data is None:
                    continue
            return f, _memlens_table(data, f)
    return None


def _same_target(entry: str, file: Path, symbol: str, base: Path) -> bool:
    path, _, name = entry.rpartition(":")
    return name == symbol and (base / path).resolve() == file.resolve()


def load_recipe(file: Path, symbol: str, recipe_path: Path | None = None) -> Recipe:
    """The recipe for `file.py:symbol`: defaults, then the matching [[model]] entry."""
    found = None
    if recipe_path is not None:
        try:
            data = tomllib.loads(recipe_path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise MemlensError(f"cannot read recipe: {e}", Location(str(recipe_path), 0)) from None
        if recipe_path.name == "pyproject.toml":
            data = data.get("tool", {}).get("memlens", {})
        found = (recipe_path, _memlens_table(data, recipe_path))
    else:
        found = find_recipe_file(file.parent)
    recipe = Recipe()
    if found is None:
        return recipe
    path, data = found
    recipe.source = str(path)
    _apply(recipe, data, str(path))
    for entry in data.get("model", []):
        if isinstance(entry, dict) and _same_target(str(entry.get("target", "")), file, symbol,
                                                    path.parent):
            _apply(recipe, entry, str(path))
    return recipe


def recipe_targets(path: Path, data: dict[str, Any]) -> list[tuple[Path, str]]:
    """Every `file.py:Symbol` a recipe file names (for finding trace targets)."""
    out = []
    for entry in data.get("model", []):
        target = str(entry.get("target", "")) if isinstance(entry, dict) else ""
        file, _, symbol = target.rpartition(":")
        if file and symbol:
            out.append(((path.parent / file).resolve(), symbol))
    return out
