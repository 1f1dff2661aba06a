"""The CLI's output is memlens' own (issue 27 item 9): torch's fake-tensor log of a failing op
goes to the trace log, not the terminal; a snapshot nested 900 deep is one `error:` line naming
the file, not a RecursionError traceback."""

import json

import pytest

from memlens.errors import SnapshotError
from memlens.snapshot.io import MAX_NESTING, _nesting_exceeds, read_snapshot
from memlens.worker.protocol import snapshot_folder_name
from support.paths import REPO
from support.runs import run_memlens

SHAPE_ERROR = """\
import torch
model = torch.nn.Linear(8, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(2, 7, device="cuda")
model(x).sum().backward()
optimizer.step()
"""


def _nested(depth: int):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_is_measured_in_levels_of_containers():
    assert not _nesting_exceeds({"a": [1, 2, {"b": [3]}]}, 4)  # dict, list, dict, list
    assert _nesting_exceeds({"a": [1, 2, {"b": [3]}]}, 3)
    assert not _nesting_exceeds(_nested(MAX_NESTING), MAX_NESTING)
    assert _nesting_exceeds(_nested(MAX_NESTING + 1), MAX_NESTING)
    assert not _nesting_exceeds(7, 0)  # a number holds nothing


@pytest.mark.slow  # traces in a fresh process
def test_a_failing_op_prints_memlens_error_not_torchs_log(tmp_path):
    (tmp_path / "bad.py").write_text(SHAPE_ERROR)
    out = run_memlens("run", "--device", "h100-80gb", "--", "bad.py", cwd=tmp_path)
    assert out.returncode == 1
    assert "failed while attempting to run meta" not in out.stderr
    assert "fake_tensor.py" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"error: {tmp_path / 'bad.py'}:5: bad.py raised RuntimeError")
    # torch's record went to the trace log, named like the language server's, and one line
    # says where.
    folder = snapshot_folder_name("script", "bad.py", str(tmp_path / "bad.py"))
    logs = list((tmp_path / ".memlens" / "logs").glob(f"{folder}-*.log"))
    assert len(logs) == 1
    log = logs[0].read_text()
    assert "failed while attempting to run meta for aten.mm.default" in log
    assert "a and b must have same reduction dim" in log
    assert f"torch logged 1 message: {logs[0]}" in out.stderr


@pytest.mark.slow
def test_a_trace_torch_logs_nothing_in_writes_no_log(tmp_path):
    out = run_memlens("run", "--device", "cpu", "--no-snapshot", "--",
                      str(REPO / "python" / "tests" / "scripts" / "patterns.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "torch logged" not in out.stderr
    assert not (tmp_path / ".memlens" / "logs").exists()


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("snap") / "good.json"
    out = run_memlens("trace", str(REPO / "examples" / "gpt" / "model.py:GPT"), "--device",
                      "cpu", "--iterations", "1", "--snapshot", str(path))
    assert out.returncode == 0, out.stderr
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("place", ["target", "kernels"])
def test_show_of_a_value_nested_900_deep_is_one_error_naming_the_file(tmp_path, good, place):
    # meta.target and meta.kernels are objects the schema leaves open: the value passes it and
    # used to reach the report's escaping, which recursed until Python gave up.
    doc = json.loads(json.dumps(good))
    doc["meta"][place]["extra"] = _nested(900)
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError) as caught:
        read_snapshot(path)
    assert str(caught.value) == f"{path}: not a snapshot (values nested more than 64 deep)"
    out = run_memlens("show", str(path))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr
    assert out.stderr.strip() == f"error: {path}: not a snapshot (values nested more than 64 " \
                                 "deep)"
    doc["meta"][place]["extra"] = _nested(MAX_NESTING - 3)  # the document, meta, place: 3 levels above
    path.write_text(json.dumps(doc))
    assert run_memlens("show", str(path)).returncode == 0


MADE_UP_VALUE = """\
import torch


def patches_per_side(grid):
    side = int(grid[0].item())  # a made-up 0 in a trace
    return 224 // side


grid = torch.randint(7, 28, (2,), device="cuda")  # values made on the GPU: unknown in a trace
print(patches_per_side(grid))
"""


@pytest.mark.slow  # traces in a fresh process
def test_an_error_after_a_made_up_value_says_where_the_value_was_read(tmp_path):
    """Code that computes from a tensor's value fails on the value the trace made up (one
    made on the GPU; a host-made one would be known): the error names the read, its line and
    the answer."""
    (tmp_path / "grid.py").write_text(MADE_UP_VALUE)
    out = run_memlens("run", "--no-snapshot", "--", "grid.py", cwd=tmp_path)
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {tmp_path / 'grid.py'}:6: grid.py raised ZeroDivisionError: integer division or "
        f"modulo by zero (after {tmp_path / 'grid.py'}:5 read a tensor's value (item), which a "
        "trace does not have: it answered 0; code whose shapes or control flow follow tensor "
        "values cannot be traced with made-up ones)"]


BROADCAST_KEYS = """\
import torch.distributed as dist


def shared_keys():
    keys = [["step", "exp_avg"]] if dist.get_rank() == 0 else [None]
    dist.broadcast_object_list(keys, src=0)
    assert keys[0] is not None, "rank 0 sends the keys"
    return keys[0]


dist.init_process_group("nccl")
print(shared_keys())
"""


@pytest.mark.slow  # traces in a fresh process
def test_a_failure_after_objects_another_rank_broadcast_names_the_rank_to_trace(tmp_path):
    """A receiver's placeholder (None) stays None in a trace of that rank: the sender's
    objects are not known there (FSDP's optimizer-state save on a rank other than 0 fails
    so); the error says which rank to trace instead."""
    (tmp_path / "keys.py").write_text(BROADCAST_KEYS)
    out = run_memlens("run", "--no-snapshot", "--world-size", "2", "--rank", "1", "--",
                      "keys.py", cwd=tmp_path)
    assert out.returncode == 1
    [error] = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert error.endswith(
        f"raised AssertionError: rank 0 sends the keys (after {tmp_path / 'keys.py'}:6 received "
        "the objects broadcast by rank 0, which a trace of this rank does not have: it answered "
        "None; trace rank 0 instead, --rank 0: the objects it sends are its own)")
