"""Output files: nothing that is not ours is replaced, and a file that cannot be written loses
no report (output_files.py, issue: hostile and unlucky input)."""

import json
import os
import resource
import stat
import subprocess
import sys

import pytest

from support.paths import REPO
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = "import torch\nw = torch.nn.Linear(256, 256)\nw(torch.randn(8, 256)).sum().backward()\n"
# Linear(256, 256) in fp32 on the CPU target (no rounding): weight and bias.
PARAMETER_BYTES = 4 * (256 * 256 + 256)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _run(script, snapshot, *flags, **kwargs):
    return run_memlens("run", "--device", "cpu", *flags, "--snapshot", str(snapshot), "--",
                       str(script), env={"COLUMNS": "200"}, **kwargs)


def _one_error(out) -> str:
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    return errors[0]


def test_a_snapshot_is_never_written_over_the_script(script):
    out = _run(script, script)
    assert out.returncode == 1
    assert f"cannot write the snapshot {script}: it exists and is not a memlens snapshot" in \
        _one_error(out)
    assert script.read_text() == SCRIPT
    assert "Phases" in out.stdout  # the report came first


def test_a_fifo_or_a_device_node_is_refused_and_stays(script, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    targets = [fifo]
    if os.geteuid() == 0:  # a character device like /dev/null, made where we may
        null = tmp_path / "null"
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        targets.append(null)
    for target in targets:
        for flags in ((), ("--json",)):
            out = _run(target.parent / "train.py", target, *flags)
            assert out.returncode == 1
            assert f"cannot write the snapshot {target}: it is not a regular file" in \
                _one_error(out)
        mode = os.stat(target).st_mode
        assert stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def test_a_directory_in_the_way_or_a_file_as_parent_is_named(script, tmp_path):
    (tmp_path / "dir.json").mkdir()
    out = _run(script, tmp_path / "dir.json")
    assert out.returncode == 1
    assert f"{tmp_path / 'dir.json'}: it is a directory" in _one_error(out)
    out = _run(script, script / "snap.json")
    assert out.returncode == 1
    assert f"cannot write the snapshot {script / 'snap.json'}: Not a directory" in \
        _one_error(out)


def test_a_symlink_is_followed_and_stays_a_link(script, tmp_path):
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real)
    out = _run(script, link)
    assert out.returncode == 0, out.stderr[-2000:]
    assert link.is_symlink()
    snap = json.loads(real.read_text())
    assert snap["summary"]["categories_at_peak"]["parameter"] == PARAMETER_BYTES
    out = _run(script, link)  # over a snapshot: allowed
    assert out.returncode == 0 and link.is_symlink()


def test_a_full_disk_prints_the_report_then_one_error(script, tmp_path):
    # A stand-in for a full disk: a file-size limit, under which writing fails with EFBIG
    # (Python ignores SIGXFSZ) once the snapshot passes 4 KiB.
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    target = tmp_path / "out" / "snap.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "python"), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "memlens", "run", "--device", "cpu",
                          "--snapshot", str(target), "--", str(script)], env=env,
                         capture_output=True, text=True, timeout=600, preexec_fn=limit)
    assert out.returncode == 1
    assert f"cannot write the snapshot {target}: File too large" in _one_error(out)
    assert "Phases" in out.stdout and "Peak " in out.stdout  # the whole report came first
    assert list(target.parent.iterdir()) == []  # no temporary file left behind


def test_the_html_report_refuses_a_device_node_too(script, tmp_path):
    snap = tmp_path / "s.json"
    assert _run(script, snap).returncode == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = run_memlens("show", str(snap), "--html", str(fifo))
    assert out.returncode == 1
    assert f"cannot write the HTML report {fifo}: it is not a regular file" in _one_error(out)
