"""Where a module's class is defined (file and first line), as `inspect.getsourcelines` says,
for the module tables and the editor's inline numbers.

`inspect` parses a class's whole file again for every class it is asked about (its
`_ClassFinder` walks the file's syntax tree until the class's qualified name turns up): in a
Llama-7B trace the ten classes of the model took about 80 ms. Here each file is parsed once
and every class in it found in that one walk, with inspect's rules: the qualified name
through functions (`f.<locals>.C`), the first class of a name, and a decorated class's first
line its first decorator's. Where that finds nothing (a class made by `type(...)`, no source
on disk), inspect answers, as before.

Most module classes are defined at the top of their file, once: those are found by a scan of
the lines that start with `class ` (a tenth of a parse's time; parsing the model's five files
was ~5 % of a 7B trace). A nested class, a name defined twice, or a decorator that spans
lines goes to the parse.
"""

from __future__ import annotations

import ast
import bisect
import functools
import inspect
import linecache
import re
import sys


@functools.lru_cache(maxsize=None)
def class_source(cls: type) -> tuple[str, int] | None:
    try:
        filename = inspect.getsourcefile(cls)
    except TypeError:
        return None
    if filename:
        module = sys.modules.get(cls.__module__)
        line = _class_line(filename, module, cls.__qualname__)
        if line is not None:
            return filename, line
    try:
        return (filename or "", inspect.getsourcelines(cls)[1])
    except (TypeError, OSError):
        return None


def _class_line(filename: str, module, qualname: str) -> int | None:
    """The first line of the class `qualname` in the file (cached per file, as long as
    linecache holds the same text)."""
    lines = linecache.getlines(filename, module.__dict__ if module is not None else None)
    source = "".join(lines)
    line = _top_level(source).get(qualname)
    if line is not None:
        return line
    return _parsed(source).get(qualname)


_TOP_LEVEL_CLASS = re.compile(r"^class[ \t]+(\w+)[ \t]*[(:]", re.M)


@functools.lru_cache(maxsize=64)
def _top_level(source: str) -> dict[str, int]:
    """Name -> first line of each class statement at column 0 whose name occurs once there and
    whose decorators (if any) are one line each; the rest is left to `_parsed`."""
    seen: dict[str, list[int]] = {}
    for match in _TOP_LEVEL_CLASS.finditer(source):
        seen.setdefault(match.group(1), []).append(match.start())
    if not seen:
        return {}
    starts = [0, *(m.end() for m in re.finditer("\n", source))]  # offset of each line
    lines = source.splitlines()
    found: dict[str, int] = {}
    for name, offsets in seen.items():
        if len(offsets) != 1:
            continue
        first = bisect.bisect_right(starts, offsets[0]) - 1  # 0-based line of `class`
        while first > 0 and lines[first - 1].startswith("@"):
            first -= 1
        above = lines[first - 1] if first > 0 else ""
        if above[:1] in (" ", "\t", ")", "]", "}"):
            continue  # maybe the end of a decorator over several lines: parse
        found[name] = first + 1
    return found


@functools.lru_cache(maxsize=64)
def _parsed(source: str) -> dict[str, int]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, int] = {}

    def visit(node: ast.AST, stack: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, [*stack, child.name, "<locals>"])
            elif isinstance(child, ast.ClassDef):
                inner = [*stack, child.name]
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                found.setdefault(".".join(inner), first)
                visit(child, inner)
            else:
                visit(child, stack)

    visit(tree, [])
    return found
