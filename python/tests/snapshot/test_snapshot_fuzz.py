"""Random hostile and unlucky snapshots — mutations of a real small one: keys deleted, types
swapped, huge and negative numbers, long and control-character strings, indices that point
nowhere — through every reader of snapshots: `memlens show`, `show --json`, `show --html`,
`export --memory-viz` and the language server's digest. Whatever the file, each ends with exit
status 0 or 1, and on 1 with exactly one `error:` line (or one JSON error object for --json):
never a traceback. A seeded generator (no hypothesis in the venv): the same cases every run."""

import contextlib
import io
import json
import random
import subprocess
import sys

import pytest

from support.paths import REPO
from support.runs import run_memlens, traced_gpu_snapshot

pytestmark = pytest.mark.slow  # traces in fresh processes

SEED = 15
CASES = 60

HOSTILE_STRINGS = ["", "\n", "a\nb\r\nc", "\x1b[2J\x1b]8;;http://evil.example/\x1b\\x", "[/]", "[bold]",
                   "\x00", "\u202e\u2028", "é" * 50, "x" * 100_000, "../../../../etc/passwd",
                   "cuda:abc", "cuda:-1", "cuda:99999999999999999999", "max_split_size_mb:lots"]
HOSTILE_NUMBERS = [-1, -2, 0, 1, 7, 8, 2**31, 2**53 - 1, 2**53 + 1, 2**63, 10**30, -(10**30), 1.5,
                   -0.0, 1e308, True, False]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """A GPU target's snapshot with an allocation stream (so `export` replays something)."""
    return traced_gpu_snapshot(tmp_path_factory.mktemp("fuzz"))


def _paths(node, prefix=()):
    """Every place in the document, containers included."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _mutate(doc: dict, rng: random.Random) -> str:
    """One random change somewhere in `doc` (in place); says what it did."""
    path = rng.choice([p for p in _paths(doc) if p])
    parent, key = _get(doc, path[:-1]), path[-1]
    old = parent[key]
    kind = rng.choice(["delete", "type", "number", "string", "index", "empty", "grow"])
    if kind == "delete":
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif kind == "type":
        parent[key] = rng.choice([None, "1", 1, 1.0, [], {}, [old], {"x": old}])
    elif kind == "number" or (kind == "index" and not isinstance(old, int)):
        parent[key] = rng.choice(HOSTILE_NUMBERS)
    elif kind == "index":
        parent[key] = old + rng.choice([1, 3, 1000, 10**6])
    elif kind == "string":
        parent[key] = rng.choice(HOSTILE_STRINGS)
    elif kind == "empty":
        parent[key] = type(old)() if isinstance(old, (list, dict, str)) else 0
    else:  # a list or string many times longer
        parent[key] = old * 50 if isinstance(old, (list, str)) else old
    return f"{kind} at {'/'.join(map(str, path))}"


def _same_type(doc: dict, rng: random.Random) -> str:
    """A string replaced by a hostile string, or an integer by another integer: changes the
    schema mostly admits, so the readers behind it see them."""
    path = rng.choice([p for p in _paths(doc) if p and type(_get(doc, p)) in (str, int)])
    parent, key = _get(doc, path[:-1]), path[-1]
    if isinstance(parent[key], str):
        parent[key] = rng.choice(HOSTILE_STRINGS)
    else:
        parent[key] = rng.choice([0, 1, 2, 2**31, 2**53 - 1, parent[key] + 1, parent[key] * 1000])
    return f"same type at {'/'.join(map(str, path))}"


def _cases(base: dict) -> list[tuple[str, str]]:
    """(what was changed, document text); half of them keep the types."""
    rng = random.Random(SEED)
    cases = []
    for i in range(CASES):
        doc = json.loads(json.dumps(base))
        mutate = _same_type if i % 2 else _mutate
        changes = [mutate(doc, rng) for _ in range(rng.choice([1, 1, 2, 3]))]
        cases.append(("; ".join(changes), json.dumps(doc)))
    return cases


def _main(argv: list[str]) -> tuple[int, str, str]:
    """The CLI's main in this process: (exit status, stdout, stderr)."""
    from memlens.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _assert_one_outcome(what: str, rc: int, stdout: str, stderr: str, json_out: bool = False):
    assert rc in (0, 1), f"{what}: exit {rc}\n{stderr[-2000:]}"
    assert "Traceback" not in stdout + stderr, f"{what}:\n{stderr[-3000:]}"
    if rc == 1:
        errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, f"{what}: {len(errors)} error lines\n{stderr[-2000:]}"
    if json_out:
        lines = stdout.strip().splitlines()
        assert len(lines) == 1, f"{what}: stdout is not one JSON line: {stdout[:500]!r}"
        doc = json.loads(lines[0], parse_constant=lambda c: pytest.fail(f"{what}: {c} in JSON"))
        assert ("error" in doc) == (rc == 1), f"{what}: {lines[0][:500]}"


def test_random_snapshots_end_in_a_report_or_one_error(tmp_path, base, fake_bundle):
    from memlens.snapshot.digest import digest_file

    outcomes = {0: 0, 1: 0}
    exports = {0: 0, 1: 0}
    for i, (what, text) in enumerate(_cases(base)):
        path = tmp_path / f"case{i}.json"
        path.write_text(text)
        what = f"case {i} ({what})"
        rc, out, err = _main(["show", str(path)])
        _assert_one_outcome(what, rc, out, err)
        outcomes[rc] += 1
        rc_json, out, err = _main(["show", str(path), "--json"])
        _assert_one_outcome(what + " --json", rc_json, out, err, json_out=True)
        assert rc_json == rc, what
        html = tmp_path / f"case{i}.html"
        rc_html, out, err = _main(["show", str(path), "--html", str(html)])
        _assert_one_outcome(what + " --html", rc_html, out, err)
        assert html.exists() == (rc_html == 0), what
        rc_export, out, err = _main(["export", str(path), "--memory-viz", str(tmp_path / "x.pickle")])
        _assert_one_outcome(what + " export", rc_export, out, err)
        exports[rc_export] += 1
        assert rc_html == rc and (rc_export == 0) <= (rc == 0), what
        digest = digest_file(path)
        json.dumps(digest, allow_nan=False)  # what the server reads back is plain JSON
        # The digest skips the allocation stream, so it may accept what `show` refuses, never less.
        assert ("error" in digest) <= (rc == 1), f"{what}: digest {str(digest)[:500]}"
    # The generator makes both kinds: snapshots still readable and snapshots refused.
    assert outcomes[0] >= 15 and outcomes[1] >= 20 and exports[0] >= 10, (outcomes, exports)


def test_a_few_cases_as_a_user_runs_them(tmp_path, base):
    """The same contract across a process boundary: the console script's exit status and
    streams, and the digest helper the language server starts."""
    cases = _cases(base)[:4]
    paths = []
    for i, (what, text) in enumerate(cases):
        path = tmp_path / f"case{i}.json"
        path.write_text(text)
        paths.append(str(path))
        out = run_memlens("show", str(path), "--json")
        _assert_one_outcome(f"case {i} ({what})", out.returncode, out.stdout, out.stderr,
                            json_out=True)
    env_path = str(REPO / "python")
    digest = subprocess.run([sys.executable, "-m", "memlens.snapshot.digest", *paths],
                            capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert digest.returncode == 0 and "Traceback" not in digest.stderr, digest.stderr
    lines = [json.loads(ln) for ln in digest.stdout.splitlines()]
    assert [d["path"] for d in lines] == paths
