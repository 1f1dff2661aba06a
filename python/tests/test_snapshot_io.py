"""`memlens show` on snapshots that are broken or hostile: one clear error naming the file and
the place, exit status 1, never a traceback."""

import json

import pytest

from conftest import REPO, run_memlens


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("snap") / "good.json"
    out = run_memlens("trace", str(REPO / "examples" / "gpt" / "model.py:GPT"), "--device", "cpu",
                      "--iterations", "1", "--snapshot", str(path))
    assert out.returncode == 0, out.stderr
    return json.loads(path.read_text())


def _show(tmp_path, content: str | bytes):
    path = tmp_path / "s.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path, run_memlens("show", str(path))


def _mutated(good: dict, change) -> str:
    doc = json.loads(json.dumps(good))
    change(doc)
    return json.dumps(doc)


def test_a_good_snapshot_shows(tmp_path, good):
    _, out = _show(tmp_path, json.dumps(good))
    assert out.returncode == 0, out.stderr
    assert "Phases" in out.stdout


@pytest.mark.parametrize("content, message", [
    ('{"format": "memlens.snapshot", "version": 1, "meta": {', "looks truncated"),
    ("[" * 100_000, "nested too deeply"),
    (b"\xff\xfe{}", "not UTF-8"),
    ('{"format": "other"}', "not a memlens snapshot"),
    ('{"format": "memlens.snapshot", "version": 99}', "version 99 is not supported"),
])
def test_unreadable_files(tmp_path, content, message):
    path, out = _show(tmp_path, content)
    assert out.returncode == 1
    assert message in out.stderr and str(path) in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("change, where", [
    (lambda d: d["tensors"][0].update(bytes="many"), "tensors/0/bytes"),
    (lambda d: d["summary"].update(peak_bytes=-1), "summary/peak_bytes"),
    (lambda d: d["tensors"][0].update(stack=10**9), "tensors/0: index out of range"),
    (lambda d: d["stacks"].__setitem__(0, [10**9]), "stacks/0: frame index out of range"),
    (lambda d: d["summary"].update(peak_tensor=10**9), "summary/peak_tensor"),
])
def test_schema_and_reference_errors_name_the_place(tmp_path, good, change, where):
    path, out = _show(tmp_path, _mutated(good, change))
    assert out.returncode == 1
    assert f"{path}: invalid snapshot at {where}" in out.stderr.replace("\n", "")
    assert "Traceback" not in out.stderr
