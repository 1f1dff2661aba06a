"""The package's shape, checked from its source: imports go one way (no cycles, none inside a
room either, no room importing a room above it; imports under `if TYPE_CHECKING:` count), the
package root holds only the few modules everything shares, and the TypeScript rooms import
common/ and never each other (docs/architecture.md draws the same picture)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "memlens"

# Rooms from the bottom up: a module may import its own room and the rooms below it, never one
# above. A room is a subpackage of the root or a root module; a dotted name places one module
# apart from its room (the longest name that matches decides).
LAYERS = [
    # shared vocabulary
    {"errors", "units", "categories", "devices", "progress", "worker"},
    # models of the machine and the job, each usable alone
    {"allocator", "cuda", "kernels", "patches", "distributed"},
    # the snapshot document and its derivation from a ledger (handed in, never imported)
    {"snapshot"},
    # the engine, and the library integrations the tracer installs
    {"engine", "plugins"},
    # workloads, and the session that traces one and builds its snapshot
    {"targets"},
    # output formats
    {"reports"},
    # searches over many traces (memlens fit)
    {"fit"},
    # entry points: the CLI, the language server, the Megatron-LM flag
    {"cli", "__main__", "server", "megatron_lm"},
]
ROOT_MODULES_AT_MOST = 8  # besides __init__.py and __main__.py


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST):
    """Import nodes anywhere: functions and `if TYPE_CHECKING:` included (a type a module names
    is a dependency on the module that defines it, even if it is never imported at run time)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The memlens modules `name` imports (a package counts as its __init__)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level == 0:
                module = node.module or ""
            else:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            # `from package import submodule` imports the submodule; any other name comes from
            # the package's __init__
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                       for alias in node.names]
        for target in targets:
            if target in modules and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str) -> int:
    rest = module.split(".", 1)[1] if "." in module else "__init__"
    best: tuple[int, int] | None = None  # (length of the matching name, layer)
    for index, rooms in enumerate(LAYERS):
        for room in rooms:
            if (rest == room or rest.startswith(room + ".")) and (best is None or len(room) > best[0]):
                best = (len(room), index)
    assert best is not None, f"{module}: in no layer of test_architecture.LAYERS"
    return best[1]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_the_imports_it_must():
    # the checker itself: relative, absolute, `from . import module` and function-level imports
    graph = import_graph()
    assert "memlens.engine.ledger" in graph["memlens.engine.tracer"]
    assert "memlens.patches.torch_distributed" in graph["memlens.engine.tracer"]  # in a method
    assert "memlens.kernels.cpu.conv" in graph["memlens.kernels.cpu.rules"]  # from . import conv
    assert "memlens.reports.terminal" in graph["memlens.cli.main"]
    assert "memlens.allocator.segment_host" in graph["memlens.allocator.release"]  # TYPE_CHECKING
    assert len(graph) > 100


def test_no_import_cycles():
    """None across rooms and none inside one (helpers take a Protocol of what they use, such as
    allocator/segment_host.py, instead of importing the class that uses them)."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_a_room_above_its_own():
    upward = [f"{module} ({room_of(module)}) imports {target} ({room_of(target)})"
              for module, targets in import_graph().items() if module != "memlens"
              for target in targets if target != "memlens" and layer_of(target) > layer_of(module)]
    assert upward == []


def test_the_engine_never_imports_the_server_the_reports_or_the_cli():
    graph = import_graph()
    bad = [(m, t) for m, targets in graph.items() if room_of(m) == "engine"
           for t in targets if room_of(t) in ("server", "reports", "cli")]
    assert bad == []


def test_the_package_root_holds_only_shared_modules():
    root = [p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert len(root) <= ROOT_MODULES_AT_MOST, sorted(root)
    assert set(root) <= set().union(*LAYERS), "a root module in no layer"


def test_the_cycle_finder_finds_a_cycle_and_its_path():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_every_memlens_import_names_a_module_that_exists():
    """A module moved to another room leaves no import of its old place behind (an import in a
    function fails only when it runs)."""
    modules = all_modules()
    missing = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memlens"):
                module = node.module
            else:
                continue
            if module not in modules:
                missing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {module}")
    assert missing == []


def test_tests_and_benches_import_memlens_modules_that_exist():
    """Tests and benches name modules by path too (often inside functions, as subprocess code)."""
    import importlib.util
    import re

    repo = PACKAGE.parents[1]
    found = set()
    for path in [*(repo / "python" / "tests").rglob("*.py"), *(repo / "bench").glob("*.py")]:
        for module in re.findall(r"^\s*(?:from|import)\s+(memlens(?:\.\w+)+)", path.read_text(),
                                 re.M):
            if importlib.util.find_spec(module) is None:
                found.add(f"{path.relative_to(repo)}: {module}")
    assert sorted(found) == []


def test_plugins_are_one_folder_per_library():
    """plugins/ holds the host (`__init__.py`: PLUGINS, PluginHost; `context.py`: what a
    plugin may use and what a plugin is; `imports.py`; `library_plugin.py`) and one subpackage per library: a new library is a new folder."""
    plugins = PACKAGE / "plugins"
    host = {"__init__.py", "context.py", "imports.py", "library_plugin.py"}
    loose = sorted(p.name for p in plugins.glob("*.py") if p.name not in host)
    assert loose == [], "a plugin module outside its library's folder"
    libraries = [p for p in plugins.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert {"megatron", "hf", "torchao"} <= {p.name for p in libraries}
    assert all((p / "__init__.py").is_file() for p in libraries)


# TypeScript: the extension host (src/) and the panel (webview/) both import common/; common/
# imports neither, and neither imports the other.
TS_MAY_IMPORT = {"common": {"common"}, "src": {"src", "common"}, "webview": {"webview", "common"}}
_TS_IMPORT = re.compile(r"""(?:\bfrom\s+|\bimport\s*\(?\s*)['"](\.{1,2}/[^'"]*)['"]""")


def ts_imports_across_rooms(repo: Path) -> list[str]:
    """`file: room -> room` for each relative TypeScript import that leaves what its room may
    import (import type and dynamic import() included)."""
    bad = []
    for room, allowed in TS_MAY_IMPORT.items():
        for path in sorted((repo / room).rglob("*.ts")):
            for spec in _TS_IMPORT.findall(path.read_text()):
                target = (path.parent / spec).resolve().relative_to(repo).parts[0]
                if target in TS_MAY_IMPORT and target not in allowed:
                    bad.append(f"{path.relative_to(repo)}: {room} -> {target} ({spec})")
    return bad


def test_typescript_rooms_import_common_and_never_each_other():
    assert ts_imports_across_rooms(PACKAGE.parents[1]) == []


def test_the_typescript_check_sees_an_import_across_rooms(tmp_path):
    for room in TS_MAY_IMPORT:
        (tmp_path / room).mkdir()
    (tmp_path / "common" / "a.ts").write_text("import type { X } from '../src/x';\n")
    (tmp_path / "webview" / "b.ts").write_text("import { Y } from '../common/y';\n"
                                                "const z = await import('../src/z');\n")
    assert ts_imports_across_rooms(tmp_path) == [
        "common/a.ts: common -> src (../src/x)", "webview/b.ts: webview -> src (../src/z)"]


def test_tests_live_in_the_folder_of_their_room():
    """python/tests/<room>/test_*.py, beside the room of memlens they test (support/, scripts/
    and cases/ hold what they share); only this whole-package test stays at the top."""
    tests = Path(__file__).resolve().parent
    assert sorted(p.name for p in tests.glob("test_*.py")) == ["test_architecture.py"]
    names = [p.name for p in tests.glob("*/test_*.py")]
    assert len(names) == len(set(names)), "two test files of one name (pytest imports by name)"


def test_outside_the_engine_a_tracer_is_handed_in_typed():
    """A function outside engine/ that takes the tracer names what it may use of it (a
    PluginContext, a TraceFacts, the Tracer itself where the room is above the engine), so
    that what each room reads of a trace is declared, not duck-typed."""
    untyped = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "engine":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                untyped += [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"
                            for a in args if a.arg == "tracer" and a.annotation is None]
    assert untyped == []


def test_every_plugin_is_made_the_same_way():
    """Each plugin module has a `Plugin(context, watcher)` with `deactivate()`
    (plugins/context.py), the one shape the PluginHost makes."""
    import importlib

    from memlens.plugins import PLUGINS

    for name in PLUGINS.values():
        plugin = importlib.import_module(f"memlens.plugins.{name}").Plugin
        assert callable(getattr(plugin, "deactivate", None)), name
        assert list(inspect.signature(plugin).parameters)[:2] == ["tracer", "watcher"], name
