"""Read how a training job is launched: `.vscode/launch.json` configurations and `torchrun`
command lines in shell scripts.

Shared by the language server (finding trace targets) and the CLI (`memlens run --launch`;
`--from-script` runs the script, memlens.targets.shell_record, and reads its text only to
name lines). Pure Python, no torch. Nothing here runs anything: it only reads text.

    configs = read_launch_file(".vscode/launch.json", workspace_folder=".")
    commands = torchrun_commands(Path("scripts/train.sh").read_text())
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Location, MemlensError
from .jsonc import JsonObject, parse_jsonc  # noqa: F401 (re-exported)

# ---------------------------------------------------------------------------------------------
# torchrun command lines
# ---------------------------------------------------------------------------------------------

# torchrun options that take a value (both spellings, as torch.distributed.run accepts them).
_TORCHRUN_VALUE_OPTIONS = {
    "nnodes", "nproc_per_node", "nproc-per-node", "rdzv_backend", "rdzv-backend", "rdzv_endpoint",
    "rdzv-endpoint", "rdzv_id", "rdzv-id", "rdzv_conf", "rdzv-conf", "max_restarts",
    "max-restarts", "monitor_interval", "monitor-interval", "start_method", "start-method",
    "role", "node_rank", "node-rank", "master_addr", "master-addr", "master_port",
    "master-port", "local_addr", "local-addr", "log_dir", "log-dir", "redirects", "tee",
    "local_ranks_filter", "local-ranks-filter", "logs_specs", "logs-specs", "rdzv_timeout",
    "event_log_handler", "numa_binding", "numa-binding", "signals_to_handle", "local-rank",
    "local_rank", "run_path", "run-path", "virtual_local_rank", "virtual-local-rank",
}
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_ACCELERATE_MODULE = "accelerate.commands.launch"
_ASSIGNMENT = re.compile(r"^(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class TorchrunCommand:
    """One `torchrun ...` (or `python -m torch.distributed.run ...`) line of a shell script."""

    line: int  # 1-based line where the command starts
    end_line: int  # 1-based line where it ends (after backslash continuations)
    script: str | None  # the training script, or None with `module`
    module: str | None = None  # `torchrun -m package.train`
    args: list[str] = field(default_factory=list)  # the script's own arguments
    nproc_per_node: int | None = None
    nnodes: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # VAR=value prefixes on the line
    text: str = ""  # the command as written (continuations joined)
    nproc_text: str | None = None  # --nproc_per_node as written (variables expanded)
    nnodes_text: str | None = None
    launcher: str = "torchrun"  # or "accelerate" (`accelerate launch ...`)
    config_file: str | None = None  # accelerate's --config_file as written

    @property
    def world_size(self) -> int | None:
        if self.nproc_per_node is None:
            return None
        return self.nproc_per_node * (self.nnodes or 1)

    @property
    def name(self) -> str:
        what = self.module or (Path(self.script).name if self.script else self.launcher)
        return f"{what} (line {self.line})"


def _logical_lines(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, text) with backslash continuations joined; 1-based lines."""
    out, buf, start = [], [], 0
    for i, raw in enumerate(text.splitlines(), start=1):
        if not buf:
            start = i
        if raw.rstrip().endswith("\\"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        out.append((start, i, " ".join(buf)))
        buf = []
    if buf:
        out.append((start, start + len(buf) - 1, " ".join(buf)))
    return out


def _expand(word: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _VARIABLE.sub(sub, word)


def _int(value: str) -> int | None:
    value = value.split(":")[-1]  # elastic "1:4" -> the upper bound
    return int(value) if value.isdigit() else None


def parse_torchrun_args(words: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"script": None, "module": None, "args": [], "nproc": None,
                           "nnodes": None, "nproc_text": None, "nnodes_text": None}
    i, module_flag = 0, False
    while i < len(words):
        w = words[i]
        if w == "--":
            i += 1
            break
        if not w.startswith("-"):
            break
        name, eq, value = w.lstrip("-").partition("=")
        if name in ("m", "module"):
            module_flag = True
            i += 1
            continue
        if name in _TORCHRUN_VALUE_OPTIONS:
            if not eq:
                value = words[i + 1] if i + 1 < len(words) else ""
                i += 1
            if name in ("nproc_per_node", "nproc-per-node"):
                out["nproc"], out["nproc_text"] = _int(value), value
            elif name == "nnodes":
                out["nnodes"], out["nnodes_text"] = _int(value), value
        i += 1  # a flag without a value (--standalone, --no-python) or the option just read
    rest = words[i:]
    if rest:
        if module_flag:
            out["module"] = rest[0]
        else:
            out["script"] = rest[0]
        out["args"] = rest[1:]
    return out


# accelerate launch's options that take no value (accelerate/commands/launch.py).
ACCELERATE_FLAGS = frozenset({
    "quiet", "q", "cpu", "multi_gpu", "tpu", "enable_cpu_affinity", "dynamo_use_fullgraph",
    "dynamo_use_dynamic", "dynamo_use_regional_compilation", "use_deepspeed", "use_fsdp",
    "use_parallelism_config", "use_megatron_lm", "same_network", "module", "m", "no_python",
    "tpu_cluster", "no_tpu_cluster", "tpu_use_sudo", "debug", "downcast_bf16",
})


def accelerate_options(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """accelerate launch's options (name -> value, spelt with underscores) and what follows them
    (the script and its arguments)."""
    options: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        name, eq, value = words[i].lstrip("-").replace("-", "_").partition("=")
        if name not in ACCELERATE_FLAGS and not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
            i += 1
        options[name] = value
        i += 1
    return options, words[i:]


def parse_accelerate_args(words: list[str]) -> dict[str, Any]:
    """`accelerate launch` options as written, in parse_torchrun_args's shape: processes per
    machine from --num_processes (over all machines) and --num_machines; `config_file` when
    accelerate reads the counts from a file instead (accelerate_launch.py reads it)."""
    options, rest = accelerate_options(words)
    module = "module" in options or "m" in options
    total, machines = _int(options.get("num_processes", "")), _int(
        options.get("num_machines", "1"))
    nproc = total // machines if total is not None and machines and total % machines == 0 \
        else None
    return {"script": None if module or not rest else rest[0],
            "module": rest[0] if module and rest else None, "args": rest[1:],
            "nproc": nproc, "nnodes": machines if nproc is not None else None,
            "nproc_text": options.get("num_processes"), "nnodes_text": options.get("num_machines"),
            "config_file": options.get("config_file")}


def _torchrun_start(words: list[str]) -> tuple[int, str] | None:
    """(index of the first launcher option in `words`, "torchrun" or "accelerate"), or None if
    this is no torchrun (or `accelerate launch`) command."""
    for i, w in enumerate(words):
        base = os.path.basename(w)
        if base == "torchrun":
            return i + 1, "torchrun"
        if base == "accelerate" and words[i + 1:i + 2] == ["launch"]:
            return i + 2, "accelerate"
        if re.fullmatch(r"python[0-9.]*", base) and words[i + 1:i + 2] == ["-m"] and \
                words[i + 2:i + 3] and words[i + 2] in (*_TORCHRUN_MODULES, _ACCELERATE_MODULE):
            return i + 3, "accelerate" if words[i + 2] == _ACCELERATE_MODULE else "torchrun"
    return None


def torchrun_commands(text: str, problems: list[tuple[int, str]] | None = None
                      ) -> list[TorchrunCommand]:
    """Every torchrun command in a shell script. Simple `NAME=value` assignments earlier in the
    script are substituted (`--nproc_per_node=$GPUS`); what cannot be resolved stays as written.
    `problems`, if given, receives (line, why) for each line that names torchrun but could not
    be read as a torchrun command."""
    variables: dict[str, str] = {}
    problems = problems if problems is not None else []
    out: list[TorchrunCommand] = []
    for first, last, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            words = shlex.split(stripped, comments=True)
        except ValueError as e:  # an unbalanced quote: not something we can read
            if _names_torchrun(stripped):
                problems.append((first, f"cannot split the command into words ({e}): an "
                                        "unbalanced quote?"))
            continue
        if not words:
            continue
        m = _ASSIGNMENT.match(stripped)
        if len(words) == 1 and m:
            variables[m.group(1)] = _expand(words[0].split("=", 1)[1], variables)
            continue
        if words[0] == "export" and len(words) > 1:
            for w in words[1:]:
                name, eq, value = w.partition("=")
                if eq:
                    variables[name] = _expand(value, variables)
            continue
        words = [_expand(w, variables) for w in words]
        found = _torchrun_start(words)
        if found is None:
            continue
        start, launcher = found
        env = {}
        for w in words[:start]:
            name, eq, value = w.partition("=")
            if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                env[name] = value
        parsed = (parse_accelerate_args if launcher == "accelerate" else
                  parse_torchrun_args)(words[start:])
        if parsed["script"] is None and parsed["module"] is None:
            problems.append((first, f"{launcher} is given no training script (or -m module)"))
            continue
        out.append(TorchrunCommand(first, last, parsed["script"], parsed["module"],
                                   parsed["args"], parsed["nproc"], parsed["nnodes"], env,
                                   stripped, parsed["nproc_text"], parsed["nnodes_text"],
                                   launcher, parsed.get("config_file")))
    return out


def _names_torchrun(line: str) -> bool:
    return bool(re.search(r"(^|[\s/])(torchrun|accelerate\s+launch)(\s|$)", line)) or any(
        m in line for m in (*_TORCHRUN_MODULES, _ACCELERATE_MODULE))


# ---------------------------------------------------------------------------------------------
# .vscode/launch.json
# ---------------------------------------------------------------------------------------------

_PYTHON_TYPES = ("python", "debugpy")


@dataclass
class LaunchConfig:
    """A Python configuration of launch.json, with VS Code's variables resolved."""

    name: str
    line: int  # 1-based line of the configuration in launch.json
    program: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    nproc_per_node: int | None = None  # when the configuration runs torchrun
    nnodes: int | None = None
    unresolved: list[str] = field(default_factory=list)  # ${...} we could not resolve
    env_file: str | None = None  # `envFile`, resolved (read it with read_env_file)
    nproc_text: str | None = None  # torchrun's --nproc_per_node as written
    runs_torchrun: bool = False  # the configuration runs torchrun (else one plain process)

    @property
    def world_size(self) -> int | None:
        if self.nproc_per_node is None:
            return None
        return self.nproc_per_node * (self.nnodes or 1)


def _resolver(workspace_folder: str | None, unresolved: list[str]):
    folder = workspace_folder or ""

    def resolve(value: Any) -> str:
        text = str(value)

        def sub(m: re.Match) -> str:
            key = m.group(1)
            if key == "workspaceFolder" or key == "workspaceRoot":
                return folder
            if key == "workspaceFolderBasename":
                return os.path.basename(folder.rstrip("/\\"))
            if key == "userHome":
                return str(Path.home())
            if key == "pathSeparator" or key == "/":
                return os.sep
            if key.startswith("env:"):
                return os.environ.get(key[4:], "")
            unresolved.append(m.group(0))
            return m.group(0)

        return re.sub(r"\$\{([^}]+)\}", sub, text)

    return resolve


def launch_configs(doc: Any, workspace_folder: str | None, name: str = "launch.json"
                   ) -> list[LaunchConfig]:
    """The Python configurations of a parsed launch.json document."""
    if not isinstance(doc, dict):
        raise MemlensError("launch.json must hold an object", Location(name, 1))
    raw = doc.get("configurations", [])
    if not isinstance(raw, list):
        raise MemlensError("`configurations` must be an array", Location(name, 1))
    out = []
    for entry in raw:
        if not isinstance(entry, dict) or entry.get("type") not in _PYTHON_TYPES:
            continue
        if entry.get("request", "launch") != "launch":
            continue
        unresolved: list[str] = []
        resolve = _resolver(workspace_folder, unresolved)
        args = entry.get("args", [])
        if isinstance(args, str):  # VS Code accepts a single string, split like a shell
            try:
                args = shlex.split(resolve(args))
            except ValueError:
                args = resolve(args).split()
        else:
            args = [resolve(a) for a in args] if isinstance(args, list) else []
        env = entry.get("env", {})
        env = {str(k): resolve(v) for k, v in env.items()} if isinstance(env, dict) else {}
        cfg = LaunchConfig(
            name=str(entry.get("name", "")), line=getattr(entry, "line", 0),
            program=resolve(entry["program"]) if entry.get("program") else None,
            module=str(entry["module"]) if entry.get("module") else None,
            args=args, env=env,
            cwd=resolve(entry["cwd"]) if entry.get("cwd") else workspace_folder,
            python=resolve(entry["python"]) if entry.get("python") else None,
            unresolved=unresolved,
            env_file=resolve(entry["envFile"]) if entry.get("envFile") else None)
        # A configuration that runs torchrun: the training script is the first argument.
        runs_torchrun = cfg.module in _TORCHRUN_MODULES or (
            cfg.program is not None and os.path.basename(cfg.program) == "torchrun")
        if runs_torchrun:
            parsed = parse_torchrun_args(cfg.args)
            cfg.program, cfg.module = parsed["script"], parsed["module"]
            cfg.args = parsed["args"]
            cfg.nproc_per_node, cfg.nnodes = parsed["nproc"], parsed["nnodes"]
            cfg.nproc_text = parsed["nproc_text"]
            cfg.runs_torchrun = True
        if cfg.program is None and cfg.module is None:
            continue
        out.append(cfg)
    return out


def read_launch_file(path: str | os.PathLike, workspace_folder: str | None = None
                     ) -> list[LaunchConfig]:
    """The Python configurations of a launch.json file. `workspace_folder` defaults to the
    folder above `.vscode`."""
    path = Path(path)
    if workspace_folder is None:
        workspace_folder = str(path.resolve().parent.parent)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MemlensError(f"cannot read {path}: {e}") from None
    return launch_configs(parse_jsonc(text, str(path)), workspace_folder, str(path))


def find_launch_config(path: str | os.PathLike, name: str,
                       workspace_folder: str | None = None) -> LaunchConfig:
    configs = read_launch_file(path, workspace_folder)
    for cfg in configs:
        if cfg.name == name:
            return cfg
    names = ", ".join(repr(c.name) for c in configs) or "none"
    raise MemlensError(f"no Python launch configuration named {name!r} in {path}; "
                       f"configurations there: {names}")


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")


def read_env_file(path: str | os.PathLike, base: dict[str, str] | None = None,
                  config: LaunchConfig | None = None) -> dict[str, str]:
    """The variables of a launch configuration's `envFile` (dotenv: `NAME=value` lines,
    `export` prefixes, `#` comments, quoted values, `${NAME}` from earlier lines or `base`).
    A line that is none of these is an error naming that line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        where = f" (envFile of {config.name!r}, launch.json line {config.line})" if config else ""
        raise MemlensError(f"cannot read {path}{where}: {e}") from None
    out: dict[str, str] = {}
    known = dict(base or {})
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(raw)
        if not m:
            raise MemlensError("expected NAME=value", Location(str(path), n))
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            quote, value = value[0], value[1:-1]
        else:
            quote, value = "", value.split(" #", 1)[0].rstrip()
        if quote != "'":
            value = _expand(value, {**known, **out})
        out[m.group(1)] = value
    return out
