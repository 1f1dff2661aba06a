"""Trace once, assert many: a `memlens run|trace` that several tests need is run once per test
session, and every test gets the same process result and snapshot.

A trace is keyed by what determines it: the command line, the working directory, the
environment the test adds, the content of every file the command line names, and the memlens
source tree. The results live in a folder of this session (shared by pytest-xdist's workers,
which take a lock per key, so a trace two workers ask for at once still runs once). Tests of
the process boundary itself (exit codes, Ctrl-C, time limits, the worker protocol) keep their
own processes: they call support.runs.run_memlens.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from support.paths import REPO, TESTS
from support.runs import run_memlens

# One folder per test session: xdist gives its workers a shared run id; a plain pytest run
# makes its own (the variable is set for the processes it starts, too).
_RUN_ID_ENV = "PYTEST_XDIST_TESTRUNUID"
_OWN_RUN_ID = uuid.uuid4().hex


@dataclass(frozen=True)
class Trace:
    out: subprocess.CompletedProcess
    snapshot_path: Path

    def snapshot(self) -> dict:
        return json.loads(self.snapshot_path.read_text())

    def summary(self) -> dict:
        """The `--json` summary the run printed on stdout."""
        return json.loads(self.out.stdout)


@lru_cache(maxsize=1)
def _source_hash() -> str:
    h = hashlib.sha256()
    for path in sorted((REPO / "python" / "memlens").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".cpp", ".json"):
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _folder() -> Path:
    run_id = os.environ.get(_RUN_ID_ENV) or _OWN_RUN_ID
    folder = Path(tempfile.gettempdir()) / f"memlens-test-traces-{run_id}"
    folder.mkdir(exist_ok=True)
    return folder


def _key(args: tuple[str, ...], cwd, env: dict | None) -> str:
    h = hashlib.sha256(_source_hash().encode())
    h.update(json.dumps([list(args), str(cwd or ""), sorted((env or {}).items())]).encode())
    for arg in args:
        path = Path(cwd or ".", arg)
        if len(arg) < 4096 and path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()[:24]


def traced(*args: str, cwd: str | os.PathLike | None = None, env: dict | None = None) -> Trace:
    """`memlens ARGS --snapshot FILE` (the snapshot option is added here: give none), run once
    per session for each distinct input. The first `--` in ARGS is where the option goes."""
    assert "--snapshot" not in args and "--no-snapshot" not in args, "the cache names the file"
    key = _key(args, cwd, env)
    folder = _folder()
    snapshot = folder / f"{key}.json"
    result = folder / f"{key}.result.json"
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            split = args.index("--") if "--" in args else len(args)
            argv = [*args[:split], "--snapshot", str(snapshot), *args[split:]]
            out = run_memlens(*argv, cwd=cwd, env=env)
            result.write_text(json.dumps({"args": out.args, "returncode": out.returncode,
                                          "stdout": out.stdout, "stderr": out.stderr}))
    saved = json.loads(result.read_text())
    return Trace(subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"],
                                             saved["stderr"]), snapshot)


def grow_trace(batch: int, env: dict | None = None) -> Trace:
    """scripts/grow.py on an H100 with `--batch BATCH` and --json: test_oom.py reads its verdict,
    test_export_memory_viz.py exports its snapshot."""
    script = TESTS / "scripts" / "grow.py"
    return traced("run", "--device", "h100-80gb", "--json", "--", str(script), "--batch",
                  str(batch), env=env)
