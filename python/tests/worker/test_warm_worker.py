"""The warm worker (worker/warm.py, cli/fork_server.py): a trace forked from a process that has
torch and memlens imported gives the cold worker's snapshot, and a hostile script behaves in a
forked child exactly as in a cold one (its error, its time limit, its leftover processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from memlens.server.worker import Worker
from memlens.worker import process_tree, warm
from memlens.worker.process_tree import WorkerProcess
from memlens.worker.protocol import worker_env

from support.lsp import pid_alive
from support.paths import REPO

pytestmark = pytest.mark.slow  # every test here starts worker processes

PY = sys.executable
LIMIT = 120
# The free order at a step's end follows the hash seed (cold runs differ without it); a forked
# child has its warm process's seed, so both are started with one.
ENV = worker_env(extra={"PYTHONHASHSEED": "0"})


def env(**extra):
    return {**ENV, **extra}


@pytest.fixture(scope="module")
def server():
    """One warm process for the module, as the language server keeps one."""
    started = warm.prestart(PY, env())
    assert started is not None and started.ready(), started and started.error
    yield started
    warm.stop_all()


def _script(tmp_path, body: str):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body))
    return path


def _trace(script, cwd, *options, time_limit=LIMIT, environment=None):
    """`memlens run` of `script` through the language server's worker, to its end."""
    argv = [PY, "-m", "memlens", "run", "--json", "--no-snapshot", *options, "--", str(script)]
    worker = Worker(argv, str(cwd), environment or ENV, time_limit, None)
    result = asyncio.run(asyncio.wait_for(worker.run(), time_limit + 60))
    return worker, result


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _without_run_facts(snapshot: dict) -> dict:
    """A snapshot less what differs between any two runs: when it ran, how long it took, and
    the command line (which names the snapshot's own path)."""
    for key in ("created", "duration_s", "command"):
        snapshot["meta"].pop(key)
    return snapshot


GPT = REPO / "examples" / "gpt" / "train.py"
GPT_ARGS = ["--batch-size", "2", "--n-layer", "2", "--block-size", "256", "--steps", "2"]


def test_a_forked_trace_writes_the_cold_traces_snapshot(server, tmp_path):
    snapshots = {}
    for kind in ("warm", "cold"):
        path = tmp_path / f"{kind}.json"
        argv = [PY, "-m", "memlens", "run", "--json", "--snapshot", str(path), "--", str(GPT),
                *GPT_ARGS]
        make = warm.worker_process if kind == "warm" else WorkerProcess
        process = make(argv, str(GPT.parent), env())
        assert isinstance(process, warm.ForkedWorkerProcess) == (kind == "warm")
        process.start()
        ended = process.wait(LIMIT)
        assert ended.returncode == 0, ended.stdout[-2000:]
        snapshots[kind] = json.loads(path.read_text())
    warm_snap, cold_snap = (_without_run_facts(snapshots[k]) for k in ("warm", "cold"))
    assert warm_snap["summary"]["peak_bytes"] > 0
    # Where several tensors are released at one instant (a container's teardown), their order
    # follows object addresses, which differ between any two heaps (a cold run and a fork);
    # every tensor is freed at the same instants, and everything else is equal.
    for snap in (warm_snap, cold_snap):
        snap["allocations"]["free_seq"] = sorted(snap["allocations"].pop("free_seq"))
        points = snap["timeline"].pop("points")
        snap["timeline"]["column_peaks"] = [max(column) for column in zip(*points)]
        snap["timeline"]["instants"] = len(points)
    assert warm_snap == cold_snap


def test_the_child_is_forked_from_the_warm_process_and_sees_its_own_job(server, tmp_path):
    out = tmp_path / "seen.json"
    script = _script(tmp_path, f"""
        import json, os, sys, torch
        json.dump({{"ppid": os.getppid(), "cwd": os.getcwd(), "path0": sys.path[0],
                   "argv": sys.argv, "flag": os.environ.get("MY_FLAG"),
                   "cuda": torch.cuda.is_available(), "sid": os.getsid(0) == os.getpid()}},
                  open({str(out)!r}, "w"))
    """)
    worker, result = _trace(script, tmp_path, environment=env(MY_FLAG="on"))
    assert result.status == "ok", result.log[-20:]
    assert worker.process.forked
    seen = json.loads(out.read_text())
    assert seen == {"ppid": server._proc.pid, "cwd": str(tmp_path), "path0": str(tmp_path),
                    "argv": [str(script)], "flag": "on", "cuda": True, "sid": True}


def test_a_script_error_is_the_same_as_in_a_cold_worker(server, tmp_path):
    script = _script(tmp_path, """
        import torch
        x = torch.zeros(4, device="cuda")
        raise RuntimeError("the loader is broken")
    """)
    worker, forked = _trace(script, tmp_path)
    assert worker.process.forked
    cold, _ = None, None
    os.environ[warm.ENABLE_ENV] = "0"
    try:
        cold_worker, cold = _trace(script, tmp_path)
    finally:
        del os.environ[warm.ENABLE_ENV]
    assert not getattr(cold_worker.process, "forked", False)
    assert forked.status == cold.status == "failed"
    assert forked.returncode == cold.returncode != 0
    assert forked.error == cold.error
    assert (forked.error["kind"], forked.error["line"]) == ("ScriptError", 4)


def test_os_exit_in_the_script_is_the_workers_exit(server, tmp_path):
    script = _script(tmp_path, """
        import os
        os._exit(7)
    """)
    worker, result = _trace(script, tmp_path)
    assert worker.process.forked
    assert (result.status, result.returncode, result.output) == ("failed", 7, None)


def test_a_hang_ends_at_the_time_limit_with_every_process_it_started(server, tmp_path):
    pids = tmp_path / "pids"
    script = _script(tmp_path, f"""
        import os, subprocess, sys, time
        # a small fork bomb: children in sessions of their own, each starting another
        kids = [subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                                  "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
                                  "start_new_session=True); time.sleep(300)"], start_new_session=True)
                for _ in range(5)]
        open({str(pids)!r}, "w").write(" ".join(str(k.pid) for k in kids))
        time.sleep(300)
    """)
    started = time.monotonic()
    worker, result = _trace(script, tmp_path, time_limit=8)
    assert worker.process.forked
    assert result.status == "timeout" and time.monotonic() - started < 60
    assert all(_gone(int(p)) for p in pids.read_text().split())
    assert _gone(worker.pid)
    assert server.alive()  # the warm process outlives what it forked


def _seen(tmp_path):
    """A script that writes what it sees of CUDA and why it was not forked, if it was not."""
    out = tmp_path / "seen.json"
    script = _script(tmp_path, f"""
        import json, os, torch
        json.dump({{"cuda": torch.cuda.is_available(),
                   "why": os.environ.get("MEMLENS_WARM_FALLBACK")}}, open({str(out)!r}, "w"))
    """)
    return script, out


def test_a_cpu_target_is_forked_from_a_warm_process_without_the_cuda_shim(server, tmp_path):
    cpu = warm.prestart(PY, env(), shim=False)
    assert cpu is not None and cpu is not server and cpu.ready(), cpu and cpu.error
    script, out = _seen(tmp_path)
    worker, result = _trace(script, tmp_path, "--device", "cpu")
    assert result.status == "ok", result.log[-20:]
    assert worker.process.forked and worker.process.server is cpu
    assert json.loads(out.read_text()) == {"cuda": False, "why": None}


def test_a_target_in_the_other_kind_of_warm_process_runs_cold(server, tmp_path):
    """A GPU target in a child of the CPU warm process (torch imported without the shim), and
    a CPU target in a child of the GPU one: each re-executes itself as a cold worker."""
    script, out = _seen(tmp_path)
    argv = [PY, "-m", "memlens", "run", "--json", "--no-snapshot", "--", str(script)]
    for device, kind, cuda, why in (
            ("h100-80gb", False, True,
             "a h100-80gb target needs the CUDA shim, loaded before torch"),
            ("cpu", True, False, "a cpu target needs a process without the CUDA shim")):
        process = warm.ForkedWorkerProcess(warm.prestart(PY, env(), shim=kind),
                                           argv[:4] + ["--device", device] + argv[4:],
                                           str(tmp_path), ENV)
        process.start()
        ended = process.wait(LIMIT)
        assert ended.returncode == 0, ended.stdout[-2000:]
        assert process.forked
        assert json.loads(out.read_text()) == {"cuda": cuda, "why": why}


def test_what_the_warm_process_cannot_stand_for_runs_cold(server, tmp_path):
    argv = [PY, "-m", "memlens", "run", "--", "x.py"]
    # torch reads TORCH_* while importing: a different value needs a fresh import
    other = env(TORCH_SHOW_CPP_STACKTRACES="1")
    assert type(warm.worker_process(argv, None, other)) is WorkerProcess
    assert type(warm.worker_process([PY, "-c", "pass"], None, env())) is WorkerProcess
    assert type(warm.worker_process(argv, None, env())) is warm.ForkedWorkerProcess
    # a memlens or torch file changed since the warm process imported it
    marker = tmp_path / "changed.py"
    marker.write_text("a = 1\n")
    saved = server._watch
    server._watch = saved + [[str(marker), os.stat(marker).st_mtime_ns]]
    try:
        assert not server.stale()
        os.utime(marker, ns=(0, 0))
        assert server.stale()
        assert type(warm.worker_process(argv, None, env())) is WorkerProcess
    finally:
        server._watch = saved


def test_the_bytecode_cache_leaves_the_warm_process_current_and_a_new_source_does_not(tmp_path):
    """Python writes `__pycache__` into an editable install's folders as modules are first
    imported: that changes a folder's time, not its sources, and must not make the warm
    process stale (it was replaced then, and the traces forked from it killed)."""
    from memlens.worker import source_stamps

    package, other = tmp_path / "pkg", tmp_path / "site"
    (package / "engine").mkdir(parents=True)
    other.mkdir()
    (package / "__init__.py").write_text("")
    (package / "engine" / "tracer.py").write_text("a = 1\n")
    stamps = source_stamps.watched(str(package), [str(other)])
    assert {p for p, _ in stamps} == {str(other), str(package), str(package / "__init__.py"),
                                      str(package / "engine"),
                                      str(package / "engine" / "tracer.py")}
    (package / "engine" / "__pycache__").mkdir()
    (package / "engine" / "__pycache__" / "tracer.cpython-311.pyc").write_bytes(b"\0")
    assert not any(source_stamps.changed(p, s) for p, s in stamps)
    (package / "engine" / "replay.py").write_text("b = 2\n")  # a new module
    assert [p for p, s in stamps if source_stamps.changed(p, s)] == [str(package / "engine")]
    os.utime(package / "engine" / "tracer.py", ns=(0, 0))  # an edited one
    assert source_stamps.changed(str(package / "engine" / "tracer.py"),
                                 dict(stamps)[str(package / "engine" / "tracer.py")])
    (other / "new-package").mkdir()  # pip installed something beside torch
    assert source_stamps.changed(str(other), dict(stamps)[str(other)])


def test_the_warm_process_watches_memlens_folders_by_their_sources(server):
    import memlens

    engine = os.path.join(os.path.dirname(memlens.__file__), "engine")
    stamps = dict(server._watch)
    assert "tracer.py" in stamps[engine] and "__pycache__" not in stamps[engine]
    assert not any(p.endswith("__pycache__") for p in stamps) and not server.stale()


def test_without_the_warm_process_its_children_end_and_workers_run_cold(tmp_path):
    own = warm.ForkServer(PY, worker_env())
    assert own.ready()
    script = _script(tmp_path, "import time\ntime.sleep(300)\n")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    child = own.fork(["run", "--", str(script)], str(tmp_path), worker_env(), None, out_w, err_w)
    for fd in (out_w, err_w, out_r, err_r):
        os.close(fd)
    own.stop()
    assert child.wait(30) == -9  # told by the warm process's socket closing
    assert _gone(child.pid)
    assert not own.ready(0)


def test_a_replaced_warm_process_stops_once_the_traces_forked_from_it_end(tmp_path):
    """A warm process found stale (pip installed something, memlens changed) is replaced
    before the next trace: the traces still running from it run to their end, and it stops
    after the last one (an idle one at once)."""
    own = warm.ForkServer(PY, worker_env())
    assert own.ready()
    release = tmp_path / "release"
    script = _script(tmp_path, f"""
        import os, time
        while not os.path.exists({str(release)!r}):
            time.sleep(0.05)
        print("finished")
    """)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    child = own.fork(["run", "--device", "cpu", "--no-snapshot", "--", str(script)],
                     str(tmp_path), worker_env(), None, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    own.retire()
    time.sleep(1.0)
    assert own.alive() and child.returncode is None  # the trace runs on
    release.write_text("")
    assert child.wait(LIMIT) == 0
    with os.fdopen(out_r) as out, os.fdopen(err_r) as err:
        assert "finished" in out.read(), err.read()[-2000:]
    deadline = time.monotonic() + 30
    while own.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not own.alive()
    idle = warm.ForkServer(PY, worker_env())
    assert idle.ready()
    idle.retire()
    assert not idle.alive()


def test_a_child_whose_parent_died_before_it_asked_for_its_death_signal_ends(tmp_path):
    """A parent killed between fork and the child's PR_SET_PDEATHSIG sends no signal: the
    child, seeing another parent once it has asked (here: told to expect pid 1), ends as the
    signal would have ended it, instead of running the script on its own."""
    if process_tree._PRCTL is None:
        pytest.skip("no prctl (not Linux)")
    marker = tmp_path / "ran"
    child = subprocess.run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                           preexec_fn=process_tree._preexec(None, parent=1), timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert not marker.exists()
    # Its true parent: it runs.
    child = subprocess.run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                           preexec_fn=process_tree._preexec(None), timeout=60)
    assert child.returncode == 0 and marker.exists()
