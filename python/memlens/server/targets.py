"""Finding trace targets, in open documents and in the workspace:

- `model`: an `nn.Module` class (or factory) that a `memlens.toml` / `[tool.memlens]` recipe
  names;
- `script`: a Python file that calls `.backward()` and an optimizer's `.step()`;
- `launch`: a Python configuration of `.vscode/launch.json`;
- `torchrun`: a `torchrun` command line in a shell script.

Only text is read; nothing is imported or run.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import MemlensError
from ..targets.accelerate_launch import config_world_size
from ..targets.launch import launch_configs, parse_jsonc, torchrun_commands
from ..targets.recipe import find_recipe_file, recipe_targets
from ..worker.protocol import normalize_path, snapshot_folder_name
from .outline import outline
from .too_deep import or_too_deep

SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", "dist", "build", "venv", "env",
             ".venv", ".git", ".memlens", ".tox", ".mypy_cache", ".pytest_cache"}
MAX_SCAN_FILES = 20000
MAX_FILE_BYTES = 2 * 1024 * 1024
SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".slurm", ".sbatch")


@dataclass
class TargetInfo:
    id: str
    kind: str  # model | script | launch | torchrun
    name: str
    path: str  # the file that defines it (normalized)
    line: int  # 0-based
    start: int = 0  # characters on that line, for the range
    end: int = 0
    folder: str = ""  # the workspace folder it belongs to
    symbol: str | None = None
    program: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    world_size: int | None = None
    python: str | None = None
    budget: str | None = None  # from the recipe
    detail: str = ""

    @property
    def slug(self) -> str:
        """The folder under .memlens/ that holds this target's snapshots."""
        detail = {"model": self.symbol or "", "launch": self.name,
                  "torchrun": str(self.line + 1)}.get(self.kind, "")
        return snapshot_folder_name(self.kind, self.name, self.path, detail)


def folder_of(path: str, folders: Iterable[str]) -> str:
    best = ""
    for f in folders:
        if (path == f or path.startswith(f.rstrip(os.sep) + os.sep)) and len(f) > len(best):
            best = f
    return best or os.path.dirname(path)


def _rel(path: str, folder: str) -> str:
    try:
        rel = os.path.relpath(path, folder)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel.replace(os.sep, "/")


class RecipeCache:
    """find_recipe_file per folder, re-read when the recipe file changes."""

    def __init__(self, ttl: float = 2.0):
        self.ttl = ttl
        self._cache: dict[str, tuple[float, Any]] = {}

    def find(self, folder: str) -> tuple[Path, dict[str, Any]] | None:
        now = time.monotonic()
        hit = self._cache.get(folder)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        found = find_recipe_file(Path(folder))
        self._cache[folder] = (now, found)
        return found


def _name_span(lines: list[str], line0: int, name: str) -> tuple[int, int]:
    text = lines[line0] if 0 <= line0 < len(lines) else ""
    i = text.find(name)
    return (i, i + len(name)) if i >= 0 else (0, len(text))


def python_targets(path: str, text: str, folders: list[str],
                   recipes: RecipeCache | None = None) -> list[TargetInfo]:
    """Model targets (classes a recipe names) and a script target, for one Python file."""
    folder = folder_of(path, folders)
    rel = _rel(path, folder)
    out: list[TargetInfo] = []
    info = None
    lines = text.split("\n")
    found = (recipes or RecipeCache(0)).find(os.path.dirname(path))
    if found is not None:
        recipe_path, data = found
        budget = data.get("budget") if isinstance(data.get("budget"), str) else None
        for file, symbol in recipe_targets(recipe_path, data):
            if normalize_path(str(file)) != path:
                continue
            info = info or outline(text)
            sym = info.symbol(symbol)
            line0 = sym.line - 1 if sym else 0
            start, end = _name_span(lines, line0, symbol)
            out.append(TargetInfo(
                id=f"model:{rel}:{symbol}", kind="model", name=symbol, path=path, line=line0,
                start=start, end=end, folder=folder, symbol=symbol, budget=budget,
                detail=f"{rel}:{symbol} with the recipe in {_rel(str(recipe_path), folder)}"))
    if "backward" in text and "step" in text:
        info = info or outline(text)
        if info.is_training_script:
            out.append(TargetInfo(
                id=f"script:{rel}", kind="script", name=Path(path).name, path=path, line=0,
                start=0, end=len(lines[0]) if lines else 0, folder=folder, program=path,
                cwd=folder, detail=f"training script {rel}"))
    return out


def _resolve(program: str, base: str | None) -> str:
    p = Path(program).expanduser()
    if not p.is_absolute() and base:
        p = Path(base) / p
    return str(p)


def launch_targets(path: str, text: str, folders: list[str]) -> list[TargetInfo]:
    """One target per Python configuration of a launch.json document."""
    folder = folder_of(path, folders)
    if os.path.basename(os.path.dirname(path)) == ".vscode":
        folder = os.path.dirname(os.path.dirname(path))
    rel = _rel(path, folder)
    cfgs = launch_configs(parse_jsonc(text, path), folder, path)
    lines = text.split("\n")
    out = []
    for cfg in cfgs:
        line0 = max(0, cfg.line - 1)
        # The configuration's range: its "name" line if we can find it after the brace.
        for k in range(line0, min(len(lines), line0 + 30)):
            if re.search(r'"name"\s*:', lines[k]):
                line0 = k
                break
        start, end = _name_span(lines, line0, cfg.name)
        what = cfg.module and f"-m {cfg.module}" or _rel(cfg.program or "", folder)
        ws = f", {cfg.world_size} processes" if cfg.world_size else ""
        out.append(TargetInfo(
            id=f"launch:{rel}:{cfg.name}", kind="launch", name=cfg.name, path=path,
            line=line0, start=start, end=end, folder=folder,
            program=_resolve(cfg.program, cfg.cwd) if cfg.program else None, module=cfg.module,
            args=cfg.args, cwd=cfg.cwd or folder, env=cfg.env, world_size=cfg.world_size,
            python=cfg.python, detail=f"launch configuration: {what}{ws}"))
    return out


def shell_targets(path: str, text: str, folders: list[str]) -> list[TargetInfo]:
    folder = folder_of(path, folders)
    rel = _rel(path, folder)
    lines = text.split("\n")
    out = []
    for cmd in torchrun_commands(text):
        line0 = cmd.line - 1
        raw = lines[line0] if line0 < len(lines) else ""
        start = len(raw) - len(raw.lstrip())
        what = cmd.module and f"-m {cmd.module}" or cmd.script or ""
        world = cmd.world_size
        if world is None and cmd.config_file and cmd.nproc_text is None:
            world = config_world_size(os.path.join(folder, cmd.config_file))
        ws = f", {world} processes" if world else ""
        out.append(TargetInfo(
            id=f"torchrun:{rel}:{cmd.line}", kind="torchrun", name=cmd.name, path=path,
            line=line0, start=start, end=len(raw.rstrip()), folder=folder,
            program=_resolve(cmd.script, folder) if cmd.script else None, module=cmd.module,
            args=cmd.args, cwd=folder, env=cmd.env, world_size=world,
            detail=f"{cmd.launcher} {what}{ws} ({rel}:{cmd.line})"))
    return out


def is_launch_file(path: str) -> bool:
    return os.path.basename(path) == "launch.json" and \
        os.path.basename(os.path.dirname(path)) == ".vscode"


def is_shell_file(path: str, text: str = "") -> bool:
    return path.endswith(SHELL_SUFFIXES) or (
        text.startswith("#!") and re.match(r"#!.*\b(ba|z|da)?sh\b", text.split("\n", 1)[0]) is not None)


def document_targets(path: str, text: str, folders: list[str],
                     recipes: RecipeCache | None = None) -> list[TargetInfo]:
    """The targets a document defines. Raises MemlensError for a launch.json that does not
    parse or a recipe that does not, or a file too deep to parse (the caller reports it)."""
    return or_too_deep(path, lambda: _document_targets(path, text, folders, recipes))


def _document_targets(path: str, text: str, folders: list[str],
                      recipes: RecipeCache | None) -> list[TargetInfo]:
    if path.endswith((".py", ".pyw")):
        return python_targets(path, text, folders, recipes)
    if is_launch_file(path):
        return launch_targets(path, text, folders)
    if is_shell_file(path, text):
        return shell_targets(path, text, folders)
    return []


def _walk(folder: str, budget: list[int]):
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS
                         and (not d.startswith(".") or d == ".vscode"))
        for name in sorted(files):
            budget[0] -= 1
            if budget[0] < 0:
                return
            yield os.path.join(root, name)


def _read(path: str) -> str | None:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def scan_workspace(folders: list[str], warn=lambda message: None,
                   recipes: RecipeCache | None = None) -> list[TargetInfo]:
    """Every target in the workspace folders (bounded: at most MAX_SCAN_FILES files)."""
    recipes = recipes or RecipeCache()
    out: list[TargetInfo] = []
    seen: set[str] = set()
    budget = [MAX_SCAN_FILES]
    for folder in folders:
        for raw in _walk(folder, budget):
            path = normalize_path(raw)
            if path in seen:
                continue
            seen.add(path)
            name = os.path.basename(path)
            wanted = (name.endswith(".py") or is_launch_file(path) or name.endswith(SHELL_SUFFIXES))
            if not wanted:
                continue
            text = _read(path)
            if text is None:
                continue
            if name.endswith(".py") and "backward" not in text and "class " not in text and \
                    "def " not in text:
                continue
            if name.endswith(SHELL_SUFFIXES) and "torch" not in text:
                continue
            try:
                out.extend(document_targets(path, text, folders, recipes))
            except MemlensError as e:
                warn(str(e))
        if budget[0] < 0:
            warn(f"stopped looking for trace targets after {MAX_SCAN_FILES} files")
            break
    return out
