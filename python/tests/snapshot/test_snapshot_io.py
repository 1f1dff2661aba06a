"""`memlens show` on snapshots that are broken or hostile: one clear error naming the file and
the place, exit status 1, never a traceback."""

import json

import pytest

from support.paths import REPO
from support.runs import run_memlens, traced_gpu_snapshot

pytestmark = pytest.mark.slow  # traces in fresh processes


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


@pytest.fixture(scope="module")
def cuda_good(tmp_path_factory) -> dict:
    """A GPU target's snapshot: it has the allocator's rows (reserved, fragmentation)."""
    return traced_gpu_snapshot(tmp_path_factory.mktemp("snap"))


HOSTILE_NAME = ("evil[/] [bold red]x\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\ "
                "\x1b[31mred\x07")


def test_snapshot_strings_reach_the_terminal_as_plain_text(tmp_path, cuda_good):
    def change(d):
        d["meta"]["target"]["name"] = HOSTILE_NAME
        d["lines"][0]["file"] = "a[/]b\x1b[2J.py"
        d["meta"]["notes"] = ["[link=http://evil.example]click[/link]"]

    _, out = _show(tmp_path, _mutated(cuda_good, change))
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "\x1b" not in text and "\x07" not in text  # no escape sequence, no OSC 8 link
    # Markup is shown as the text it is, not applied (and `[/]` raises no MarkupError).
    assert "evil[/] [bold red]x]8;;http://evil.example/" in text
    assert "[link=http://evil.example]click[/link]" in text


def test_a_huge_string_is_cut_for_the_terminal(tmp_path, cuda_good):
    _, out = _show(tmp_path, _mutated(cuda_good, lambda d: d["meta"]["target"].update(
        name="A" * 100_000)))
    assert out.returncode == 0, out.stderr
    header = " ".join(out.stdout.split()[:4])
    assert "A" * 299 + "…" in out.stdout.replace("\n", "") and "A" * 300 not in header


@pytest.mark.parametrize("text, message", [
    ('"peak_bytes": NaN', "NaN is not a JSON number"),
    ('"peak_bytes": Infinity', "Infinity is not a JSON number"),
    ('"peak_bytes": ' + "9" * 400, "invalid snapshot at summary/peak_bytes"),
    ('"peak_bytes": ' + "9" * 5000, "Exceeds the limit"),
])
def test_numbers_json_has_not_or_too_large_to_be_bytes_are_refused(tmp_path, cuda_good, text,
                                                                    message):
    content = json.dumps(cuda_good).replace(
        f'"peak_bytes": {cuda_good["summary"]["peak_bytes"]}', text, 1)
    for flags in ((), ("--json",)):
        path = tmp_path / "s.json"
        path.write_text(content)
        out = run_memlens("show", str(path), *flags)
        assert out.returncode == 1
        assert message in out.stderr and "Traceback" not in out.stderr


def test_optional_fields_left_out_are_shown_as_dashes(tmp_path, cuda_good):
    def change(d):
        d["summary"]["outside_allocator_bytes"] = None
        d["summary"]["outside_allocator"] = None
        for row in d["summary"]["devices"].values():
            row.pop("fragmentation_bytes", None)
            row.pop("segments_at_reserved_peak", None)

    _, out = _show(tmp_path, _mutated(cuda_good, change))
    assert out.returncode == 0, out.stderr
    row = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("cuda:0") and
               "-" in ln.split()[-1])
    assert row.split()[-2:] == ["-", "-"]
    assert "+ outside 0 B" in out.stdout


MUTATIONS = json.loads((REPO / "test" / "fixtures" / "snapshot-mutations.json").read_text())[
    "mutations"]


def _set(doc: dict, path: list, value) -> dict:
    at = doc
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return doc


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: "/".join(map(str, m["set"])))
def test_the_panels_rules_hold_here_too(cuda_good, mutation):
    """The same changes the panel's validator refuses (test/unit/validate-parity.test.ts)."""
    from memlens.errors import SnapshotError
    from memlens.snapshot import validate_snapshot

    doc = _set(json.loads(json.dumps(cuda_good)), mutation["set"], mutation["value"])
    with pytest.raises(SnapshotError) as e:
        validate_snapshot(doc, "s.json")
    assert e.value.message.startswith(f"s.json: invalid snapshot at {mutation['where']}")


@pytest.mark.parametrize("change, message", [
    # An allocation of a module the snapshot does not have: export indexed past the table.
    (lambda d: d["allocations"]["stack"].__setitem__(0, 10**6),
     "invalid snapshot at allocations/0: index out of range"),
    # A configuration PyTorch would refuse: export parsed it and raised AllocatorConfigError.
    (lambda d: d["meta"]["allocator"].update(config="max_split_size_mb:lots"),
     "invalid snapshot at meta/allocator/config: "),
    # A device name that is not cuda:N: export raised ValueError from int().
    (lambda d: d["allocations"].update(devices=["cuda:abc"]),
     "invalid snapshot at allocations/devices/0: 'cuda:abc' is not a CUDA device name"),
])
def test_export_of_an_inconsistent_snapshot_is_one_error(tmp_path, cuda_good, change, message):
    path = tmp_path / "s.json"
    path.write_text(_mutated(cuda_good, change))
    out = run_memlens("export", str(path), "--memory-viz", str(tmp_path / "out.pickle"))
    assert out.returncode == 1, out.stderr
    assert message in out.stderr.replace("\n", "") and "Traceback" not in out.stderr
    assert out.stderr.count("error:") == 1
    assert not (tmp_path / "out.pickle").exists()
