"""What the server needs to know about a Python file, read from its syntax tree (never run):
classes and their line spans, the `__init__` bodies, and whether it looks like a training
script (it calls `.backward()` and an optimizer's `.step()`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

_OPTIMIZER_HINTS = ("opt", "optim", "optimizer", "optimiser")


@dataclass
class ClassInfo:
    name: str
    line: int  # 1-based line of `class Name` (after decorators)
    end_line: int
    bases: list[str]


@dataclass
class FunctionInfo:
    name: str
    line: int
    end_line: int


@dataclass
class Outline:
    classes: list[ClassInfo] = field(default_factory=list)
    functions: list[FunctionInfo] = field(default_factory=list)  # top-level def / factories
    init_spans: list[tuple[int, int]] = field(default_factory=list)  # 1-based, inclusive
    backward_lines: list[int] = field(default_factory=list)
    step_lines: list[int] = field(default_factory=list)
    ok: bool = True  # False when the text does not parse

    @property
    def is_training_script(self) -> bool:
        return bool(self.backward_lines) and bool(self.step_lines)

    def in_init(self, line: int) -> bool:
        return any(a <= line <= b for a, b in self.init_spans)

    def symbol(self, name: str) -> ClassInfo | FunctionInfo | None:
        for c in self.classes:
            if c.name == name:
                return c
        for f in self.functions:
            if f.name == name:
                return f
        return None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    return ""


def _looks_like_optimizer(name: str, optimizers: set[str]) -> bool:
    if name in optimizers:
        return True
    last = name.rsplit(".", 1)[-1].lower()
    return any(last == h or last.startswith(h) or last.endswith(h) for h in _OPTIMIZER_HINTS)


def outline(text: str) -> Outline:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return Outline(ok=False)
    out = Outline()
    optimizers: set[str] = set()  # names assigned from something.optim.X(...) / *Optimizer(...)
    step_calls: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out.classes.append(ClassInfo(node.name, node.lineno, node.end_lineno or node.lineno,
                                         [_dotted(b) for b in node.bases]))
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        item.name == "__init__":
                    out.init_spans.append((item.lineno, item.end_lineno or item.lineno))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            callee = _dotted(node.value.func)
            if ".optim." in f".{callee}." or callee.endswith("Optimizer") or \
                    callee.split(".")[-1] in ("AdamW", "Adam", "SGD", "Adafactor", "Lion"):
                for t in node.targets:
                    optimizers.add(_dotted(t))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "backward":
                out.backward_lines.append(node.lineno)
            elif node.func.attr == "step":
                step_calls.append((node.lineno, _dotted(node.func.value),
                                   [_dotted(a) for a in node.args]))
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.functions.append(FunctionInfo(stmt.name, stmt.lineno,
                                              stmt.end_lineno or stmt.lineno))
    for line, receiver, args in step_calls:
        # optimizer.step(), self.opt.step(), or scaler.step(optimizer) with AMP.
        if _looks_like_optimizer(receiver, optimizers) or any(
                _looks_like_optimizer(a, optimizers) for a in args if a):
            out.step_lines.append(line)
    out.classes.sort(key=lambda c: c.line)
    out.backward_lines.sort()
    out.step_lines.sort()
    return out
