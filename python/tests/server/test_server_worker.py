"""The trace worker (process group, time limit, memory limit, progress lines), the worker's
command line, how failures are explained, and reading snapshots for the server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time

import pytest

from memlens.snapshot.digest import digest_file
from memlens.server.index import SnapshotIndex
from memlens.server.settings import Settings
from memlens.server.targets import TargetInfo
from memlens.server.tracing import (TraceRequest, explain_failure, progress_text,
                                    traceback_frames)
from memlens.server.worker import Worker, WorkerResult
from memlens.worker.protocol import final_json, normalize_path, trace_command

from support.paths import TESTS
from support.runs import run_memlens
from support.lsp import pid_alive

PY = sys.executable


def run(coro):
    return asyncio.run(coro)


@pytest.mark.slow  # starts a worker process (its server-side runner)
def test_worker_reads_progress_lines_and_the_json_on_stdout(tmp_path):
    code = textwrap.dedent("""
        import json, sys
        for phase in ("starting", "forward_backward_iter_0", "optimizer_step_iter_0"):
            sys.stderr.write(json.dumps({"event": "progress", "phase": phase}) + "\\n")
        sys.stderr.write("a line the script printed\\n")
        print(json.dumps({"peak_bytes": 42}))
    """)
    seen, output = [], []
    w = Worker([PY, "-c", code], str(tmp_path), dict(os.environ), 60, None, seen.append,
               output.append)
    result = run(w.run())
    assert result.status == "ok" and result.output == {"peak_bytes": 42}
    assert [r["phase"] for r in seen] == ["starting", "forward_backward_iter_0",
                                          "optimizer_step_iter_0"]
    assert output == ["a line the script printed"]
    assert progress_text({"phase": "forward_backward_iter_0", "rank": 3}) == \
        "rank 3 · forward/backward, iteration 1"


def _tree_script(pid_file):
    return textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open({str(pid_file)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """)


async def _wait_file(path, timeout=30):
    for _ in range(int(timeout * 10)):
        if path.exists() and path.read_text().strip():
            return path.read_text().split()
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def _gone(*pids, timeout=10.0):
    """SIGKILL is delivered asynchronously: on a loaded machine give it a moment."""
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow  # starts a worker process (its server-side runner)
def test_stop_ends_the_worker_and_its_children(tmp_path):
    pid_file = tmp_path / "pids"

    async def go():
        w = Worker([PY, "-c", _tree_script(pid_file)], str(tmp_path), dict(os.environ), 120, None)
        await w.start()
        task = asyncio.ensure_future(w.run())
        worker, child = map(int, await _wait_file(pid_file))
        assert os.getpgid(worker) == worker  # a group of its own
        w.stop("cancelled")
        return await asyncio.wait_for(task, 10), worker, child

    result, worker, child = run(go())
    assert result.status == "cancelled"
    assert _gone(worker, child)


@pytest.mark.slow  # starts a worker process (its server-side runner)
def test_time_limit_ends_the_worker_and_its_children(tmp_path):
    pid_file = tmp_path / "pids"
    w = Worker([PY, "-c", _tree_script(pid_file)], str(tmp_path), dict(os.environ), 2, None)
    result = run(w.run())
    assert result.status == "timeout" and 2 <= result.duration_s < 10
    worker, child = map(int, pid_file.read_text().split())
    assert _gone(worker, child)


@pytest.mark.slow  # traces or waits out a time limit in fresh processes
def test_time_limit_ends_children_that_left_the_group(tmp_path):
    """A child in a session of its own (start_new_session=True): no group kill reaches it, and it
    holds the worker's pipes; the time limit still answers at the limit, and ends it."""
    pid_file = tmp_path / "pids"
    code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                                 start_new_session=True)
        open({str(pid_file)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """)
    w = Worker([PY, "-c", code], str(tmp_path), dict(os.environ), 3, None)
    result = run(asyncio.wait_for(w.run(), 60))
    assert result.status == "timeout" and 3 <= result.duration_s < 15
    worker, child = map(int, pid_file.read_text().split())
    assert os.getsid(child) == child  # it did leave the worker's session
    assert _gone(worker, child)


@pytest.mark.slow  # traces or waits out a time limit in fresh processes
def test_time_limit_ends_a_daemon_that_dropped_its_environment(tmp_path):
    """A double fork and setsid, the grandchild exec'd with an empty environment (so without the
    worker's mark): re-parented to the worker, a subreaper, it is found from the worker down."""
    pid_file = tmp_path / "daemon"
    code = textwrap.dedent(f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execve(sys.executable, [sys.executable, "-c",
                          "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()));"
                          " time.sleep(300)"], {{}})
            os._exit(0)
        os.wait()
        time.sleep(300)
    """)
    w = Worker([PY, "-c", code], str(tmp_path), dict(os.environ), 5, None)

    async def go():
        task = asyncio.ensure_future(w.run())
        daemon = int((await _wait_file(pid_file))[0])
        assert int(open(f"/proc/{daemon}/stat").read().rsplit(")", 1)[1].split()[1]) == w.pid
        return await asyncio.wait_for(task, 60), daemon

    result, daemon = run(go())
    assert result.status == "timeout" and 5 <= result.duration_s < 20
    assert _gone(w.pid, daemon)


@pytest.mark.slow  # starts a worker process (its server-side runner)
def test_memory_limit_applies_to_the_worker(tmp_path):
    code = "b = bytearray(1024 * 1024 * 1024)\nprint('{\"allocated\": true}')"
    limited = run(Worker([PY, "-c", code], str(tmp_path), dict(os.environ), 60,
                         512 * 1024 * 1024).run())
    assert limited.status == "failed" and "MemoryError" in "\n".join(limited.log)
    free = run(Worker([PY, "-c", code], str(tmp_path), dict(os.environ), 60, None).run())
    assert free.status == "ok" and free.output == {"allocated": True}


@pytest.mark.slow  # starts a worker process (its server-side runner)
def test_a_missing_interpreter_is_an_error_not_a_crash(tmp_path):
    with pytest.raises(OSError):
        run(Worker(["/nonexistent/python", "-c", "pass"], str(tmp_path), {}, 5, None).run())


def _target(kind, **kw):
    base = dict(id=f"{kind}:x", kind=kind, name="x", path="/ws/model.py", line=0, folder="/ws")
    base.update(kw)
    return TargetInfo(**base)


def test_worker_command_lines():
    model = TraceRequest(_target("model", symbol="GPT"), "h100-80gb", iterations=3)
    argv, cwd, env = trace_command(model, "/ws/.memlens/s.json", "/py")
    assert argv == ["/py", "-m", "memlens", "trace", "/ws/model.py:GPT", "--json", "--progress",
                    "json", "--with-digest", "--device", "h100-80gb", "--iterations", "3",
                    "--snapshot", "/ws/.memlens/s.json"]
    assert cwd == "/ws" and env["PYTHONPATH"].split(os.pathsep)[0] == str(TESTS.parent)
    launch = _target("launch", program="/ws/train.py", args=["--lr", "1"], world_size=8,
                     env={"OMP_NUM_THREADS": "1"}, cwd="/ws/run")
    argv, cwd, env = trace_command(TraceRequest(launch, "cpu", rank=5), "/s.json", "/py")
    assert argv[3:4] == ["run"] and argv[-4:] == ["--", "/ws/train.py", "--lr", "1"]
    assert argv[argv.index("--world-size") + 1] == "8" and "--rank" in argv
    assert cwd == "/ws/run" and env["OMP_NUM_THREADS"] == "1"
    # A torchrun line of a shell script: the CLI runs the script and records the job (its
    # world size, arguments and exports), so the server names only the script and the line.
    torchrun = _target("torchrun", path="/ws/scripts/train.sh", line=4, program="/ws/train.py",
                       args=["--lr", "1"], world_size=8, env={"OMP_NUM_THREADS": "1"},
                       cwd="/ws")
    argv, cwd, env = trace_command(TraceRequest(torchrun, "cpu", rank=5), "/s.json", "/py")
    assert argv[-2:] == ["--from-script", "/ws/scripts/train.sh:5"] and "--" not in argv
    assert "--world-size" not in argv and argv[argv.index("--rank") + 1] == "5"
    assert cwd == "/ws" and env.get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
    module = _target("launch", module="pkg.train", world_size=1)
    argv, _, _ = trace_command(TraceRequest(module, "cpu", all_ranks=True), "/s.json", "/py")
    assert argv[-3:] == ["--", "-m", "pkg.train"] and "--world-size" not in argv
    assert argv[argv.index("--ranks") + 1] == "all"


def test_failures_are_explained():
    req = TraceRequest(_target("script", program="/ws/t.py"), "cpu")
    s = Settings(traceTimeout=30, memoryLimitMB=1024)

    def explain(status="failed", rc=1, output=None, tail=()):
        return explain_failure(WorkerResult(status, rc, output, list(tail)), req, s, "/py")

    assert explain("timeout")["message"].startswith("The trace of x ran past its time limit "
                                                    "of 30 s")
    e = explain(output={"error": {"kind": "ScriptError", "message": "t.py raised MemoryError: ",
                                  "file": "/ws/t.py", "line": 7, "traceback": "tb"}})
    assert (e["kind"], e["file"], e["line"]) == ("ScriptError", "/ws/t.py", 7)
    assert "memory limit is 1.0 GiB" in e["message"]
    assert explain(tail=["ModuleNotFoundError: No module named 'torch'"])["kind"] == \
        "MissingTorch"
    assert explain(tail=["ModuleNotFoundError: No module named 'torch._C'"])["kind"] != \
        "MissingTorch"
    assert explain(tail=["ModuleNotFoundError: No module named 'rich'"])["message"] == \
        "The worker's Python (/py) cannot run memlens: no module named 'rich'."
    assert explain(rc=-9)["message"].startswith("The trace worker was killed by SIGKILL "
                                                "(out of memory?")
    assert explain(rc=3, tail=["boom"])["message"] == "The trace worker exited with status 3: boom"


def test_traceback_frames():
    tb = ('  File "/ws/model.py", line 13, in forward\n    return self.project(h)\n'
          '  File "/ws/model.py", line 16, in project\n    raise RuntimeError("x")\n'
          'RuntimeError: x\n')
    assert traceback_frames(tb) == [("/ws/model.py", 13, "forward", "return self.project(h)"),
                                    ("/ws/model.py", 16, "project", 'raise RuntimeError("x")')]


@pytest.fixture(scope="module")
def tiny_snapshot(tmp_path_factory):
    out = tmp_path_factory.mktemp("snap") / "tiny.json"
    done = run_memlens("trace", f"{TESTS / 'scripts' / 'model_factory.py'}:Tiny", "--device",
                       "cpu", "--snapshot", str(out), "--json")
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # traces in a fresh process
def test_digest_of_a_real_snapshot(tiny_snapshot):
    d = digest_file(tiny_snapshot)
    assert "error" not in d, d.get("error")
    snap = json.loads(tiny_snapshot.read_text())
    assert d["summary"]["peakBytes"] == snap["summary"]["peak_bytes"]
    tiny = next(m for m in d["modules"] if m["cls"] == "Tiny")
    assert tiny["bytes"]["parameter"] == (16 * 16 + 16) * 4  # Linear(16, 16), float32
    assert tiny["source"] == [str((TESTS / "scripts" / "model_factory.py").resolve()), 4]
    for ln in d["lines"]:  # categories at the peak add up to the line's bytes at the peak
        assert sum(ln["categories"].values()) == ln["bytesAtPeak"]
    # the digest has exactly the typed shape the server reads (snapshot/digest.py's Digest)
    from memlens.snapshot import digest as D

    def keys(typed):
        return set(typed.__annotations__)

    assert set(d) == keys(D.Digest)
    assert set(d["meta"]) == keys(D.DigestMeta) and set(d["summary"]) == keys(D.DigestSummary)
    assert all(set(m) == keys(D.DigestModule) for m in d["modules"]) and d["modules"]
    assert all(set(ln) == keys(D.DigestLine) for ln in d["lines"]) and d["lines"]


@pytest.mark.parametrize("text,message", [
    ('{"format": "memlens.snapshot", "version": 1, "meta": {', "looks truncated"),
    ('{"format": "other"}', "not a memlens snapshot"),
    ('{"format": "memlens.snapshot", "version": 2}', "version 2 is not supported"),
    ('{"format": "memlens.snapshot", "version": 1}', "invalid snapshot at (top level)"),
    ("[" * 100_000, "nested too deeply"),
    ("\udcff", "not a snapshot"),
])
def test_digest_of_a_bad_file_is_an_error_message(tmp_path, text, message):
    bad = tmp_path / "bad.json"
    bad.write_text(text, encoding="utf-8", errors="surrogateescape")
    d = digest_file(bad)
    assert message in d["error"] and set(d) == {"path", "error"}


@pytest.mark.slow  # traces in a fresh process
def test_digest_refuses_indices_out_of_range(tiny_snapshot, tmp_path):
    snap = json.loads(tiny_snapshot.read_text())
    snap["tensors"][0]["stack"] = 10_000
    bad = tmp_path / "hostile.json"
    bad.write_text(json.dumps(snap))
    assert "index out of range" in digest_file(bad)["error"]


@pytest.mark.slow  # traces in a fresh process
def test_the_cli_and_the_server_keep_a_targets_snapshots_in_one_folder(tmp_path):
    model_file = TESTS / "scripts" / "model_factory.py"
    done = run_memlens("trace", f"{model_file}:Tiny", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = [p.parent.name for p in (tmp_path / ".memlens").glob("*/*.json")]
    target = TargetInfo(id="model:model_factory.py:Tiny", kind="model", name="Tiny",
                        path=normalize_path(str(model_file)), line=3, symbol="Tiny")
    assert written == [target.slug] and target.slug.startswith("model-Tiny-")


@pytest.mark.slow  # traces in a fresh process
def test_the_digest_the_worker_sends_is_not_read_again(tmp_path):
    """The worker's final line carries the snapshot's digest, the same as reading the file
    gives; the index takes it as it is, and a refresh starts no helper process for it."""
    ws = tmp_path / "ws"
    snapshot = ws / ".memlens" / "model-Tiny-12345678" / "20260101-000000-000000.json"
    done = run_memlens("trace", f"{TESTS / 'scripts' / 'model_factory.py'}:Tiny", "--device",
                       "cpu", "--json", "--with-digest", "--snapshot", str(snapshot))
    assert done.returncode == 0, done.stderr
    sent = final_json(done.stdout)["digest"]
    assert sent == digest_file(snapshot)
    tiny = next(m for m in sent["modules"] if m["cls"] == "Tiny")
    assert tiny["bytes"]["parameter"] == (16 * 16 + 16) * 4  # Linear(16, 16), float32
    read: list[list[str]] = []

    async def helper(paths):
        read.append(paths)
        return [digest_file(p) for p in paths]

    index = SnapshotIndex(runner=helper)
    entry = index.add(str(snapshot), sent)
    assert run(index.refresh([str(ws)])) is False and read == []
    assert index.usable() == [entry] and entry.digest is sent


@pytest.mark.slow  # traces in a fresh process
def test_index_keeps_the_newest_snapshot_per_target(tiny_snapshot, tmp_path):
    ws = tmp_path / "ws"
    d = ws / ".memlens" / "model-Tiny-12345678"
    d.mkdir(parents=True)
    old, new = d / "20250101-000000-000000.json", d / "20260101-000000-000000.json"
    old.write_text(tiny_snapshot.read_text())
    new.write_text(tiny_snapshot.read_text())
    os.utime(old, (1, 1))
    (ws / ".memlens" / "broken").mkdir()
    (ws / ".memlens" / "broken" / "x.json").write_text("{")
    logged: list[str] = []
    index = SnapshotIndex(log=logged.append)

    async def go():
        assert await index.refresh([str(ws)]) is True
        assert await index.refresh([str(ws)]) is False  # nothing changed: nothing re-read
        return index

    run(go())
    usable = index.usable()
    assert [e.path for e in usable] == [str(new)]
    assert usable[0].slug == "model-Tiny-12345678"
    model_file = str((TESTS / "scripts" / "model_factory.py").resolve())
    assert index.covering(model_file) is usable[0]
    assert index.covering("/nowhere.py") is None
    assert len(logged) == 1 and "broken" in logged[0]


# -- a traced script's children end with the trace, whatever they do ------------------------
def _script_with_a_child(tmp_path, detached: bool, raises: bool):
    """A training script that starts a child sleeping 300 s (in a session of its own, or in the
    worker's group holding its pipes) and then ends or raises; returns (script, pid file, the
    line of the raise)."""
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""\
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                                 start_new_session={detached})
        open({str(pid_file)!r}, "w").write(str(child.pid))
        {'raise RuntimeError("the loader is broken")' if raises else 'print("done")'}
    """))
    return script, pid_file, 5


LIMIT = 120  # seconds: a trace of these scripts takes ~10 s on a loaded two-core machine


def _trace_script(tmp_path, script):
    """What memlens.trace runs for a script target, to its end."""
    target = _target("script", path=str(script), program=str(script), folder=str(tmp_path))
    req = TraceRequest(target, "cpu", iterations=1)
    argv, cwd, env = trace_command(req, str(tmp_path / "snap.json"), PY)
    worker = Worker(argv, cwd, env, LIMIT, None)
    # Past the child's own 300 s only if nothing ends it: the test fails instead of hanging.
    result = run(asyncio.wait_for(worker.run(), LIMIT + 60))
    return result, explain_failure(result, req, Settings(traceTimeout=LIMIT), PY)


@pytest.mark.slow  # traces or waits out a time limit in fresh processes
@pytest.mark.parametrize("raises", [False, True], ids=["finishes", "raises"])
def test_a_child_in_its_own_session_neither_delays_the_trace_nor_outlives_it(tmp_path, raises):
    script, pid_file, line = _script_with_a_child(tmp_path, detached=True, raises=raises)
    result, error = _trace_script(tmp_path, script)
    assert result.duration_s < LIMIT / 2
    if raises:
        assert result.status == "failed"
        assert (error["kind"], error["file"], error["line"]) == ("ScriptError", str(script), line)
        assert "the loader is broken" in error["message"]
    else:
        assert result.status == "ok" and result.output["peak_bytes"] == 0  # no tensors at all
    assert _gone(int(pid_file.read_text()))


@pytest.mark.slow  # traces or waits out a time limit in fresh processes
def test_a_child_holding_the_pipes_does_not_turn_the_error_into_a_timeout(tmp_path):
    script, pid_file, line = _script_with_a_child(tmp_path, detached=False, raises=True)
    result, error = _trace_script(tmp_path, script)
    assert result.status == "failed" and result.duration_s < LIMIT / 2
    assert (error["kind"], error["file"], error["line"]) == ("ScriptError", str(script), line)
    assert _gone(int(pid_file.read_text()))
