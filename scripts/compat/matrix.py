"""`make test-compat`: the compatibility matrix, run. One virtual environment per row under
.compat/<row>/ (the versions pinned in python/requirements-dev.txt on Python 3.11; the newest
releases pip can get on Python 3.12 and 3.13), the integration smoke tests of smoke.toml in each,
and python/memlens/patches/tested_versions.py (TESTED_VERSIONS) written from what passed.

    python scripts/compat/matrix.py                       # every row
    python scripts/compat/matrix.py --rows pinned-py3.11  # one row; the others keep their record
    python scripts/compat/matrix.py --upgrade             # newest rows: pip install --upgrade first
"""

import argparse
import datetime
import json
import os
import pprint
import runpy
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".compat"
SMOKE = tomllib.loads((Path(__file__).with_name("smoke.toml")).read_text())["groups"]
RECORD = REPO / "python" / "memlens" / "patches" / "tested_versions.py"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"

# What a newest row installs: the newest release of each that pip can get for its Python (and
# the test tools). torch is whatever pip's configuration allows (this machine caps it).
NEWEST = ["torch", "transformers", "accelerate", "megatron-core", "torchao", "peft",
          "bitsandbytes", "trl", "lightning", "torchmetrics", "datasets", "rich", "jsonschema",
          "fastjsonschema", "pygls", "lsprotocol", "pytest", "pytest-lsp", "setuptools"]
# The release before the newest of each library where the pinned one is the newest too, so that
# every library is tested at two versions at least (torch: what pip's configuration allows).
PREVIOUS = {"transformers": "5.23.0", "accelerate": "1.14.0", "megatron-core": "0.18.2",
            "torchao": "0.17.0", "peft": "0.20.0", "bitsandbytes": "0.49.2", "trl": "1.15.0",
            "lightning": "2.5.6", "deepspeed": "0.18.9"}
ROWS = {"pinned-py3.11": ("3.11", "pinned"), "newest-py3.12": ("3.12", "newest"),
        "previous-py3.12": ("3.12", "previous"), "newest-py3.13": ("3.13", "newest")}
LIBRARIES = ["torch", "triton", "transformers", "safetensors", "accelerate", "megatron-core",
             "torchao", "deepspeed", "peft", "bitsandbytes", "trl", "lightning"]


def python_for(minor: str) -> str:
    found = sorted(PYENV.glob(f"{minor}.*")) if PYENV.is_dir() else []
    return str(found[-1] / "bin" / "python") if found else f"python{minor}"


def install(row: str, upgrade: bool) -> None:
    minor, kind = ROWS[row]
    venv = CACHE / row
    py = venv / "bin" / "python"
    if kind == "pinned":  # the same set-up as make setup-python, in its own folder
        env = dict(os.environ, PYTHON=python_for(minor), VENV=str(venv))
        subprocess.run([str(REPO / "scripts" / "setup-python.sh")], env=env, check=True)
        return
    stamp = venv / ".compat-installed"
    if stamp.exists() and not upgrade:
        return
    if not py.exists():
        subprocess.run([python_for(minor), "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    pins = PREVIOUS if kind == "previous" else {}
    subprocess.run([*pip, "--upgrade", *(f"{n}=={pins[n]}" if n in pins else n for n in NEWEST)],
                   check=True)
    # DeepSpeed: an sdist whose build imports torch (see scripts/setup-python.sh)
    deepspeed = f"deepspeed=={pins['deepspeed']}" if "deepspeed" in pins else "deepspeed"
    subprocess.run([*pip, "--upgrade", "--no-build-isolation", deepspeed], check=True,
                   env=dict(os.environ, DS_BUILD_OPS="0"))
    subprocess.run([*pip, "--no-deps", "-e", str(REPO / "python")], check=True,
                   capture_output=True)
    stamp.touch()


def versions(row: str) -> dict[str, str]:
    program = ("import importlib.metadata as m, json, sys\nout = {'python': sys.version.split()[0]}\n"
               f"for name in {LIBRARIES!r}:\n"
               "    try: out[name] = m.version(name)\n"
               "    except m.PackageNotFoundError: pass\n"
               "print(json.dumps(out))")
    out = subprocess.run([str(CACHE / row / "bin" / "python"), "-c", program], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def run_group(row: str, name: str, timeout: int, reuse: bool) -> dict:
    """One group's tests in the row's environment: counts, and the first failure's message.
    With `reuse`, a group run before (its JUnit file is there) is read, not run again."""
    results = CACHE / "results" / row
    results.mkdir(parents=True, exist_ok=True)
    xml = results / f"{name}.xml"
    if reuse and xml.exists():
        return read_junit(xml, "")
    xml.unlink(missing_ok=True)
    try:
        tail = pytest_run(row, [f"python/tests/{t}" for t in SMOKE[name]["tests"]], xml, timeout)
    except subprocess.TimeoutExpired:
        return {"passed": 0, "failed": 0, "skipped": 0, "error": f"timed out after {timeout} s"}
    return read_junit(xml, tail)


def pytest_run(row: str, tests: list[str], xml: Path, timeout: int) -> str:
    """pytest on `tests` in the row's environment, JUnit results to `xml` (its log beside);
    returns the output's last lines."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), MEMLENS_STRICT_TESTS="")
    env.pop("VIRTUAL_ENV", None)
    cmd = [str(CACHE / row / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "no:xdist", f"--junitxml={xml}", *tests]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    xml.with_suffix(".log").write_text(proc.stdout + proc.stderr)
    return " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])


def rerun_failed(row: str, name: str, timeout: int) -> None:
    """The failed tests of a group's earlier run again (after a fix): each one's new outcome
    replaces its old one in the group's JUnit file."""
    xml = CACHE / "results" / row / f"{name}.xml"
    tree = ET.parse(xml)
    failed = {(c.get("classname"), c.get("name")): c for c in tree.getroot().iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None}
    if not failed:
        return
    ids = [f"python/{cls.replace('.', '/')}.py::{test}" for cls, test in failed]
    again = xml.with_name(f"{name}.rerun.xml")
    pytest_run(row, ids, again, timeout)
    if not again.exists():
        return
    for case in ET.parse(again).getroot().iter("testcase"):
        old = failed.get((case.get("classname"), case.get("name")))
        if old is not None:
            old.clear()
            old.attrib.update(case.attrib)
            old.extend(list(case))
    tree.write(xml)


def read_junit(xml: Path, tail: str) -> dict:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": None}
    if not xml.exists():  # pytest stopped before its tests (an import error, say)
        counts["error"] = tail[-400:]
        return counts
    for case in ET.parse(xml).getroot().iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            counts["failed"] += 1
            if counts["error"] is None:
                message = (bad.get("message") or bad.text or "").strip().splitlines()
                counts["error"] = f"{case.get('name')}: {(message or [''])[0][:300]}"
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def next_minor(version: str) -> str:
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:2]]
    return f"{parts[0]}.{parts[1] + 1}.0"


def key(version: str) -> tuple:
    return tuple(int("".join(c for c in p if c.isdigit()) or 0)
                 for p in version.split("+")[0].split(".")[:3])


def table(matrix: dict, previous: dict) -> tuple[dict, list[str]]:
    """TESTED_VERSIONS from the record: for each area, the lowest version of its library that
    passed its group in some row, up to the minor release after the highest. An area no row
    passed keeps its previous range and is listed as not backed by the record."""
    out, unrecorded = {}, []
    for area, (library, low, high) in previous.items():
        passed = []
        for row in matrix.values():
            for group, result in row["groups"].items():
                if (area in SMOKE[group]["areas"] and result["passed"] and not result["failed"]
                        and library in row["versions"]):
                    passed.append(row["versions"][library].split("+")[0])
        if passed:
            out[area] = (library, min(passed, key=key), next_minor(max(passed, key=key)))
        else:
            out[area] = (library, low, high)
            unrecorded.append(area)
    return out, unrecorded


def write_record(matrix: dict, tested: dict, unrecorded: list[str]) -> None:
    RECORD.write_text(
        '"""The compatibility matrix\'s record and the table of tested versions made from it.\n\n'
        "GENERATED by `make test-compat` (scripts/compat/matrix.py): do not edit by hand. MATRIX:\n"
        "row -> the Python and library versions installed there, and each smoke-test group's\n"
        "counts (scripts/compat/smoke.toml). TESTED_VERSIONS: area -> (library, lowest version\n"
        "that passed the area's group in some row, first minor release above the highest);\n"
        'UNRECORDED: areas no row passed, whose range is the one written before."""\n\n'
        f"MATRIX = {pprint.pformat(matrix, width=100, sort_dicts=True)}\n\n"
        f"TESTED_VERSIONS = {pprint.pformat(tested, width=100, sort_dicts=False)}\n\n"
        f"UNRECORDED = {pprint.pformat(unrecorded, width=100)}\n")


def cells(matrix: dict, rows: list[str], group: str, passed: str, failed: str) -> list[str]:
    """A group's cell in each row: its library's version there, and its outcome (passed /
    failed / skipped tests)."""
    library = next(iter(SMOKE[group]["areas"].values()), SMOKE[group].get("library"))
    out = []
    for row in rows:
        r = matrix[row]["groups"].get(group)
        version = matrix[row]["versions"].get(library, "-")
        if r is None:
            out.append(f"{library} {version}: not run")
            continue
        mark = passed if r["passed"] and not r["failed"] else failed
        out.append(f"{library} {version}: {mark} ({r['passed']}/{r['failed']}/{r['skipped']})")
    return out


def show(matrix: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = sorted(matrix, key=lambda r: list(ROWS).index(r) if r in ROWS else len(ROWS))
    heads = [f"{row} (Python {matrix[row]['versions']['python']})" for row in rows]
    grid = Table(title="memlens compatibility matrix (tests passed/failed/skipped)")
    for head in ["group", *heads]:
        grid.add_column(head)
    # The same as a Markdown table, for the README's section on the matrix
    lines = ["| group | " + " | ".join(heads) + " |", "|---" * (len(rows) + 1) + "|"]
    for group in SMOKE:
        grid.add_row(group, *cells(matrix, rows, group, "[green]pass[/]", "[red]FAIL[/]"))
        lines.append(f"| {group} | " + " | ".join(cells(matrix, rows, group, "pass",
                                                          "**fail**")) + " |")
    Console(width=200).print(grid)
    (CACHE / "matrix.md").write_text("\n".join(lines) + "\n")
    for row in rows:
        for group, r in matrix[row]["groups"].items():
            if r["error"]:
                print(f"{row} {group}: {r['error']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows")
    parser.add_argument("--groups", default=",".join(SMOKE), help="comma-separated groups")
    parser.add_argument("--upgrade", action="store_true", help="newest rows: upgrade first")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per group")
    parser.add_argument("--reuse", action="store_true",
                        help="read a group's results of an earlier run where they are there")
    parser.add_argument("--rerun-failed", action="store_true",
                        help="with --reuse: a group's failed tests again (after a fix)")
    parser.add_argument("--record-only", action="store_true",
                        help="run nothing: the record from the results that are there")
    args = parser.parse_args()
    old = runpy.run_path(str(RECORD))
    matrix = dict(old["MATRIX"])
    failed = False
    for row in filter(None, args.rows.split(",")):  # --rows "": the table again, no run
        try:
            if not (args.reuse or args.record_only):
                install(row, args.upgrade)
        except subprocess.CalledProcessError as e:
            print(f"{row}: the environment could not be installed ({e})", file=sys.stderr)
            matrix[row] = {"versions": {"python": ROWS[row][0]}, "groups": {},
                           "date": datetime.date.today().isoformat(),
                           "install_error": str(e)}
            failed = True
            continue
        entry = {"versions": versions(row), "date": datetime.date.today().isoformat(),
                 "groups": dict(matrix.get(row, {}).get("groups", {}))}
        for group in args.groups.split(","):
            if args.record_only and not (CACHE / "results" / row / f"{group}.xml").exists():
                continue
            print(f"{row}: {group} ...", flush=True)
            if args.rerun_failed and (CACHE / "results" / row / f"{group}.xml").exists():
                rerun_failed(row, group, args.timeout)
            entry["groups"][group] = run_group(row, group, args.timeout,
                                               args.reuse or args.record_only)
            r = entry["groups"][group]
            failed |= bool(r["failed"] or r["error"] or not r["passed"])
        matrix[row] = entry
    # Rows another run recorded meanwhile are kept: only the rows run here are replaced.
    matrix = {**runpy.run_path(str(RECORD))["MATRIX"],
              **{r: matrix[r] for r in filter(None, args.rows.split(",")) if r in matrix}}
    tested, unrecorded = table(matrix, old["TESTED_VERSIONS"])
    write_record(matrix, tested, unrecorded)
    show(matrix)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
