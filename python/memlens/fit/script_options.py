"""A script's own argparse flags as axes a search could vary (read from its syntax tree: nothing
of the script runs). Find What Fits offers them: `--batch-size` (an int, default 32) becomes
`--micro-batch 32,64,128 --axis micro-batch=--batch-size`, `--seq-len` the `seq` axis, any other
integer flag a generic `--arg "--layers=12,24,48"` axis (docs/fit.md)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Flag names (without dashes, `_` as `-`) that are the built-in axes of a plain script.
BUILTIN_FLAGS = {
    "micro-batch": ("batch-size", "micro-batch-size", "micro-batch", "per-device-batch-size",
                    "per-device-train-batch-size", "train-batch-size", "bs", "mbs"),
    "seq": ("seq-len", "seq-length", "sequence-length", "max-seq-len", "max-seq-length",
            "block-size", "context-length", "max-length", "seq"),
    "tp": ("tp", "tensor-parallel-size", "tensor-model-parallel-size"),
}


@dataclass(frozen=True)
class ScriptFlag:
    flag: str  # "--batch-size"
    default: int | None
    help: str
    line: int  # 1-based, of its add_argument

    def axis(self) -> str | None:
        """The built-in axis this flag is, if any ("micro-batch", "seq")."""
        name = self.flag.lstrip("-").replace("_", "-").lower()
        return next((axis for axis, names in BUILTIN_FLAGS.items() if name in names), None)

    def values(self) -> str:
        """Values around the default: it, twice and four times it (1,2,4 without one)."""
        d = self.default if self.default and self.default > 0 else 1
        return f"{d},{2 * d},{4 * d}"

    def space(self) -> list[str]:
        """The options of `memlens fit` that make this flag an axis."""
        axis = self.axis()
        if axis is not None:
            return [f"--{axis}", self.values(), "--axis", f"{axis}={self.flag}"]
        return ["--arg", f"{self.flag}={self.values()}"]


def _const(node: ast.AST | None):
    return node.value if isinstance(node, ast.Constant) else None


def argparse_flags(source: str) -> list[ScriptFlag]:
    """The integer `--flags` a script's `add_argument` calls declare (`type=int`, or an int
    default), in the order of the source; a script that does not parse has none."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: dict[str, ScriptFlag] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [_const(a) for a in node.args]
        flag = next((n for n in names if isinstance(n, str) and n.startswith("--")), None)
        if flag is None:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        default = _const(kw.get("default"))
        typed_int = isinstance(kw.get("type"), ast.Name) and kw["type"].id == "int"
        int_default = isinstance(default, int) and not isinstance(default, bool)
        if not (typed_int or int_default) or kw.get("action") is not None:
            continue
        help_text = _const(kw.get("help"))
        out.setdefault(flag, ScriptFlag(flag, default if int_default else None,
                                        help_text if isinstance(help_text, str) else "",
                                        node.lineno))
    return sorted(out.values(), key=lambda f: f.line)
