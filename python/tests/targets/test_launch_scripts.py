"""`--from-script` runs the launch script with recording launchers: the job is what the shell
computed (arrays, `${1:-default}`, `$((...))`, `cd`, `source`, exports), and the script's
exports reach the traced rank. The scripts are ours, in the styles of Megatron-LM's examples,
torchtitan's run script and accelerate (python/tests/scripts/launch/)."""

import json
import sys

import pytest

from support.paths import TESTS
from support.runs import run_memlens
from support.ranks import DEVICE

pytestmark = pytest.mark.slow  # traces in fresh processes

LAUNCH = TESTS / "scripts" / "launch"
TINY = LAUNCH / "tiny_train.py"


def mlp_parameter_bytes(layers: int, hidden: int, ffn: int | None = None) -> int:
    """tiny_train.py's parameters on the GPU: per block Linear(H, F) and Linear(F, H) with
    biases, fp32, each tensor rounded up to the caching allocator's 512-byte blocks."""
    ffn = ffn or 4 * hidden
    tensors = (hidden * ffn, ffn, ffn * hidden, hidden)
    return layers * sum(-(-n * 4 // 512) * 512 for n in tensors)


def trace(cwd, *flags, env=None):
    out = run_memlens("run", "--device", DEVICE, "--json", "--progress", "none", *flags,
                      cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout), out


def test_megatron_style_arrays_defaults_arithmetic_exports_and_cd(tmp_path):
    snap = tmp_path / "snap.json"
    summary, _ = trace(tmp_path, "--rank", "5", "--snapshot", str(snap),
                       "--from-script", str(LAUNCH / "megatron_style.sh"), "--", "ckpt/run1", "128")
    report = json.loads((tmp_path / "logs" / "report-5.json").read_text())
    # 2 nodes x 4 GPUs from the arrays; rank 5 is the second node's local rank 1.
    assert (report["world"], report["WORLD_SIZE"], report["LOCAL_RANK"],
            report["LOCAL_WORLD_SIZE"]) == (8, "8", "1", "4")
    assert (summary["world_size"], summary["rank"]) == (8, 5)
    # The script's exports reached the rank, and the allocator read PYTORCH_CUDA_ALLOC_CONF.
    assert (report["CUDA_DEVICE_MAX_CONNECTIONS"], report["NCCL_IB_SL"]) == ("1", "1")
    assert json.loads(snap.read_text())["meta"]["allocator"]["config"] == \
        "expandable_segments:True"
    # ${1:-...} and ${2:-...} from `-- ckpt/run1 128`; 4 x 128 and 2 x 8 by $((...)).
    assert report["argv"] == [
        "--num-layers", "2", "--hidden-size", "128", "--ffn-hidden-size", "512",
        "--micro-batch-size", "2", "--global-batch-size", "16", "--train-iters", "100",
        "--save", "ckpt/run1", "--report", str(tmp_path / "logs" / "report-{rank}.json")]
    assert report["cwd"] == str(LAUNCH)  # the script's `cd` before torchrun
    # 2 x (128*512 + 512 + 512*128 + 128) = 263,424 fp32 parameters on the rank's GPU.
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(2, 128) == 1053696
    assert summary["categories_at_peak"]["gradient"] == 1053696
    assert summary["categories_at_peak"]["optimizer_state"] == 2 * 1053696  # AdamW: m and v
    # The script's other commands ran, once, in the directory memlens was run from.
    assert (tmp_path / "logs" / "launches.log").read_text() == "launching on 8 GPUs\n"


def test_torchtitan_style_module_source_overrides_and_environment_defaults(tmp_path):
    summary, _ = trace(tmp_path, "--no-snapshot", "--from-script",
                       str(LAUNCH / "torchtitan_style.sh"), "--",
                       "--report", str(tmp_path / "r.json"), "--micro-batch-size", "8",
                       env={"NGPU": "2"})
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["world"], summary["world_size"], report["LOCAL_WORLD_SIZE"]) == (2, 2, "2")
    # From the sourced env file, and the VAR=value prefix of the torchrun line.
    assert (report["OMP_NUM_THREADS"], report["NCCL_DEBUG"], report["LAUNCH_STYLE"]) == (
        "2", "WARN", "titan")
    # --hidden-size $((HIDDEN_BASE * 2)) with HIDDEN_BASE=32 from the env file; "$@" forwarded.
    assert report["argv"] == ["--num-layers", "3", "--hidden-size", "64", "--report",
                              str(tmp_path / "r.json"), "--micro-batch-size", "8"]
    assert report["cwd"] == str(LAUNCH)
    # 3 x (64*256 + 256 + 256*64 + 64) floats; each 64-float bias takes a 512-byte block.
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(3, 64) == 397824


def test_accelerate_launch_is_the_job_and_a_line_picks_the_plain_python_one(tmp_path):
    report_path = tmp_path / "r.json"
    env = {"REPORT": str(report_path)}
    script = str(LAUNCH / "accelerate_style.sh")
    # Without :LINE the distributed launch is traced, not the one-process check before it.
    summary, out = trace(tmp_path, "--rank", "3", "--no-snapshot", "--from-script", script,
                         env=env)
    report = json.loads(report_path.read_text())
    assert (summary["world_size"], report["world"], report["RANK"]) == (4, 4, "3")
    assert report["ACCELERATE_MIXED_PRECISION"] == "bf16"  # as accelerate tells the script
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(2, 64) == 265216
    assert "note:" not in out.stderr
    # Line 7: `python tiny_train.py ...`, one process without torchrun's variables.
    summary, _ = trace(tmp_path, "--no-snapshot", "--from-script", f"{script}:7", env=env)
    report = json.loads(report_path.read_text())
    assert (summary["world_size"], report["world"], report["WORLD_SIZE"]) == (1, 1, None)
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(1, 32) == 33792


def test_several_launches_trace_the_first_with_a_note_and_line_picks_another(tmp_path):
    (tmp_path / "sweep.sh").write_text(
        "set -e\nfor n in 2 4; do\n"
        f"  torchrun --nproc_per_node $n {TINY} --hidden-size $((16 * n)) \\\n"
        f"      --report {tmp_path}/r$n.json\n"
        "done\n"
        f"torchrun --nproc_per_node 8 {TINY} --hidden-size 8 --report {tmp_path}/r8.json\n")
    summary, out = trace(tmp_path, "--no-snapshot", "--from-script", "sweep.sh")
    assert summary["world_size"] == 2
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(2, 32)
    assert "note: sweep.sh runs 3 launch commands (line 3, line 3, line 6); tracing the first" \
        in " ".join(out.stderr.split())
    summary, _ = trace(tmp_path, "--no-snapshot", "--from-script", "sweep.sh:6")
    assert summary["world_size"] == 8
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(2, 8)


def test_torch_distributed_launch_passes_local_rank_unless_use_env(tmp_path):
    (tmp_path / "legacy.sh").write_text(
        "python -m torch.distributed.launch --nproc_per_node 2 "
        f"{TINY} --report {tmp_path}/r.json\n"
        f"python3 -u -m torch.distributed.launch --use-env --nproc_per_node 2 "
        f"{TINY} --report {tmp_path}/r2.json\n")
    trace(tmp_path, "--rank", "1", "--no-snapshot", "--from-script", "legacy.sh")
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["argv"] == ["--local-rank=1", "--report", str(tmp_path / "r.json")]
    assert report["local_rank_arg"] == 1
    trace(tmp_path, "--rank", "1", "--no-snapshot", "--from-script", "legacy.sh:2")
    report = json.loads((tmp_path / "r2.json").read_text())
    assert report["argv"] == ["--report", str(tmp_path / "r2.json")]
    assert (report["local_rank_arg"], report["LOCAL_RANK"]) == (None, "1")


def test_launchers_by_full_path_and_python_probes(tmp_path):
    """A launcher PATH does not find is still recorded (the script's PYTHONPATH starts with a
    sitecustomize that catches it); other Python runs for real, the user's sitecustomize too."""
    site = tmp_path / "user_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    (tmp_path / "full_path.sh").write_text(
        "set -euo pipefail\n"
        "NGPU=$(python3 -c 'print(1 + 1)')\n"
        "export NCCL_SITE=$(python3 -c 'import os; print(os.environ.get(\"USER_SITE_RAN\"))')\n"
        f"{sys.executable} -m torch.distributed.run --nproc_per_node $NGPU {TINY} "
        f"--report {tmp_path}/r.json\n")
    summary, _ = trace(tmp_path, "--no-snapshot", "--from-script", "full_path.sh",
                       env={"PYTHONPATH": str(site)})
    report = json.loads((tmp_path / "r.json").read_text())
    assert (summary["world_size"], report["world"], report["NCCL_SITE"]) == (2, 2, "yes")


def test_srun_runs_its_command_once_so_the_torchrun_inside_is_the_job(tmp_path):
    (tmp_path / "job.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gpus-per-node=2\n"
        "srun -N 2 --ntasks-per-node=1 --container-image img \\\n"
        f"    torchrun --nnodes 2 --nproc_per_node 2 {TINY} --report {tmp_path}/r.json\n")
    summary, _ = trace(tmp_path, "--rank", "3", "--no-snapshot", "--from-script", "job.sbatch")
    report = json.loads((tmp_path / "r.json").read_text())
    assert (summary["world_size"], report["RANK"], report["LOCAL_RANK"]) == (4, "3", "1")


def test_ranks_all_records_the_script_once(tmp_path):
    out = run_memlens("run", "--device", DEVICE, "--ranks", "all", "--json", "--no-snapshot",
                      "--from-script", str(LAUNCH / "megatron_style.sh"), "--", "ckpt", "32",
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout)["world_size"] == 8
    assert (tmp_path / "logs" / "launches.log").read_text() == "launching on 8 GPUs\n"


def test_a_one_process_launch_configuration_needs_no_world_size(tmp_path):
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "launch.json").write_text(json.dumps({"configurations": [
        {"name": "Tiny", "type": "debugpy", "request": "launch", "program": str(TINY),
         "args": ["--num-layers", "1", "--hidden-size", "32", "--report", "r.json"],
         "env": {"NCCL_DEBUG": "INFO"}}]}))
    summary, _ = trace(tmp_path, "--no-snapshot", "--launch", ".vscode/launch.json:Tiny")
    report = json.loads((tmp_path / "r.json").read_text())
    assert (summary["world_size"], report["world"], report["WORLD_SIZE"]) == (1, 1, None)
    assert report["NCCL_DEBUG"] == "INFO" and report["cwd"] == str(tmp_path)
    assert summary["categories_at_peak"]["parameter"] == mlp_parameter_bytes(1, 32) == 33792


@pytest.mark.parametrize("script,flags,env,where,message,shown", [
    ("echo 'nothing to launch here'\n", [], {}, "train.sh:1",
     "train.sh ran to its end without running a launch command (torchrun, python -m "
     "torch.distributed.run/launch, accelerate launch or python train.py)", None),
    ("set -e\necho preparing\nsource ./cluster.env\ntorchrun --nproc_per_node 2 t.py\n", [], {},
     "train.sh:3", "train.sh exited with status 1 before launching anything",
     "train.sh: line 3: ./cluster.env: No such file or directory"),
    ("echo start\ntorchrun --nproc_per_node 8 train.py --name 'unclosed\n", [], {},
     "train.sh:2", "train.sh exited with status 2 before launching anything",
     "unexpected EOF while looking for matching"),
    ("sleep 20\ntorchrun --nproc_per_node 2 t.py\n", [], {"MEMLENS_SCRIPT_TIMEOUT": "1"},
     "train.sh:1", "train.sh ran for 1 s without launching anything and was stopped", None),
    ('if [ "${CLUSTER:-}" = big ]; then\n  torchrun --nproc_per_node 8 t.py\nfi\n', [], {},
     "train.sh:2", "it names torchrun at line 2, which did not run (a branch not taken?)", None),
    ("echo start\ntorchrun --nproc_per_node 2 t.py\n", [":1"], {}, "train.sh:1",
     "line 1 of train.sh launched nothing when the script ran; the launch commands it ran: "
     "line 2", None),
])
def test_a_script_that_launches_nothing_says_why(tmp_path, script, flags, env, where, message,
                                                  shown):
    (tmp_path / "train.sh").write_text(script)
    out = run_memlens("run", "--device", DEVICE, "--from-script", "train.sh" + "".join(flags),
                      cwd=tmp_path, env=env)
    assert out.returncode == 1, out.stderr
    text = " ".join(out.stderr.split())
    assert f"error: {where}: " in text and message in text, text
    if shown:  # the script's own stderr, after the message
        assert shown in out.stderr
    assert "Traceback" not in out.stderr


def test_what_the_script_leaves_running_ends_with_the_recording(tmp_path, monkeypatch):
    """A background job in a session of its own holds the script's stderr: the recording
    still ends with the script, and so does the job."""
    import time

    from memlens.targets.shell_record import record_launches
    from support.lsp import pid_alive

    (tmp_path / "train.sh").write_text("setsid sleep 300 &\necho $! > job.pid\n"
                                       "torchrun --nproc_per_node 2 t.py --lr 1\n")
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    run = record_launches("train.sh", [])
    assert time.monotonic() - started < 30 and run.returncode == 0, run.stderr
    assert [(launch.launcher, launch.args) for launch in run.launches] == [
        ("torchrun", ["--nproc_per_node", "2", "t.py", "--lr", "1"])]
    job, deadline = int((tmp_path / "job.pid").read_text()), time.monotonic() + 10
    while pid_alive(job) and time.monotonic() < deadline:  # SIGKILL lands asynchronously
        time.sleep(0.05)
    assert not pid_alive(job)
