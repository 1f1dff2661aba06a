"""`accelerate launch --config_file cfg.yaml train.py`: the job accelerate would start, read
by accelerate itself (targets/accelerate_launch.py), with its world size and the FSDP /
DeepSpeed / mixed-precision settings it hands the script (scripts/accelerate_config/): an FSDP2
YAML and a ZeRO-2 YAML traced as a rank of their job."""

import json
import os
from importlib.metadata import version

import pytest

from memlens.server.targets import shell_targets
from memlens.targets.launch import torchrun_commands
from memlens.targets.launch_argv import launched_script
from support.paths import TESTS
from support.runs import run_memlens

CONFIGS = TESTS / "scripts" / "accelerate_config"


def test_accelerate_launch_lines_are_found_and_the_language_server_reads_the_yaml_count():
    text = ("#!/bin/bash\n"
            "accelerate launch --config_file fsdp2.yaml \\\n"
            "    fsdp_mlp.py --report r.json\n"
            "python -m accelerate.commands.launch --num_processes 8 --num_machines 2 t.py\n")
    a, b = torchrun_commands(text)
    assert (a.launcher, a.line, a.end_line, a.script, a.args, a.config_file) == (
        "accelerate", 2, 3, "fsdp_mlp.py", ["--report", "r.json"], "fsdp2.yaml")
    assert a.world_size is None  # the count is in the file, not on the line
    # --num_processes counts all machines: 8 over 2 machines are 4 per machine.
    assert (b.launcher, b.nproc_per_node, b.nnodes, b.world_size) == ("accelerate", 4, 2, 8)
    path = str(CONFIGS / "train.sh")
    targets = shell_targets(path, text, [str(CONFIGS)])
    # fsdp2.yaml says num_processes: 4.
    assert [(t.line, t.world_size) for t in targets] == [(1, 4), (3, 8)]
    assert targets[0].detail.startswith("accelerate fsdp_mlp.py, 4 processes")


@pytest.mark.slow  # accelerate reads the file in a helper process
def test_a_deepspeed_section_over_two_machines_reaches_the_script_as_accelerate_passes_it():
    launched = launched_script("accelerate", ["--config_file", "zero3.yaml", "train.py", "--x"],
                               str(CONFIGS))
    # zero3.yaml: num_processes 16 on num_machines 2 -> 8 per machine.
    assert (launched.script, launched.args, launched.nproc_per_node, launched.world_size) == (
        "train.py", ["--x"], 8, 16)
    env = launched.env
    assert (env["ACCELERATE_USE_DEEPSPEED"], env["ACCELERATE_DEEPSPEED_ZERO_STAGE"],
            env["ACCELERATE_DEEPSPEED_ZERO3_INIT"], env["ACCELERATE_MIXED_PRECISION"]) == (
        "true", "3", "true", "bf16")
    # The machine's variables are not the job's: the simulated rank sets its own.
    assert not {"MASTER_PORT", "OMP_NUM_THREADS"} & set(env)
    assert "DeepSpeed settings" in launched.note


@pytest.mark.slow
def test_a_missing_config_file_is_accelerates_own_error(tmp_path):
    out = run_memlens("run", "--no-snapshot", "--", "accelerate", "launch", "--config_file",
                      "nowhere.yaml", "t.py", cwd=tmp_path)
    assert out.returncode != 0
    assert f"accelerate {version('accelerate')} refuses this launch" in out.stderr
    assert "nowhere.yaml" in out.stderr


@pytest.fixture(scope="module")
def fsdp2_rank1(tmp_path_factory):
    """`memlens run --rank 1 -- accelerate launch --config_file fsdp2.yaml fsdp_mlp.py`,
    traced once: no --world-size, the YAML gives it."""
    tmp = tmp_path_factory.mktemp("fsdp2")
    snap, report = tmp / "snap.json", tmp / "report.json"
    out = run_memlens("run", "--rank", "1", "--json", "--progress", "none", "--snapshot",
                      str(snap), "--", "accelerate", "launch", "--config_file", "fsdp2.yaml",
                      "fsdp_mlp.py", "--report", str(report), cwd=CONFIGS)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout), json.loads(snap.read_text()), json.loads(report.read_text())


@pytest.mark.slow
def test_the_yaml_world_size_is_used_without_world_size(fsdp2_rank1):
    summary, _, report = fsdp2_rank1
    assert (summary["world_size"], summary["rank"], report["num_processes"]) == (4, 1, 4)


@pytest.mark.slow
def test_the_yaml_fsdp2_section_reaches_the_script(fsdp2_rank1):
    _, _, report = fsdp2_rank1
    assert report["distributed_type"] == "DistributedType.FSDP"
    assert (report["fsdp_version"], report["mixed_precision"]) == (2, "bf16")
    assert (report["env"]["FSDP_AUTO_WRAP_POLICY"], report["env"]["FSDP_MIN_NUM_PARAMS"]) == (
        "SIZE_BASED_WRAP", "2000")


@pytest.mark.slow
def test_parameters_are_sharded_four_ways_not_replicated_as_ddp_would(fsdp2_rank1):
    from support.ranks import model_state_bytes

    _, snap, _ = fsdp2_rank1
    # 3 x Linear(256, 256): each rank holds 256 / 4 = 64 rows of each weight (64 x 256) and
    # bias (64), fp32: 3 x (64 x 256 + 64) x 4 B = 197,376 B (plain DDP: 4 x that, 789,504 B).
    assert model_state_bytes(snap)["parameter"] == 3 * (64 * 256 + 64) * 4 == 197376


@pytest.mark.slow
def test_the_optimizer_steps_every_shard(fsdp2_rank1):
    """The AdamW made before `accelerator.prepare` is switched to the 6 sharded parameters
    (accelerate maps them by `data_ptr()`, 0 for every fake tensor: all 6 became one, and one
    shard's moments were made): exp_avg and exp_avg_sq of the rank's 3 x (64 x 256 + 64)
    elements, fp32 (AdamW's foreach path keeps its step counters on the host)."""
    from support.ranks import model_state_bytes

    _, snap, _ = fsdp2_rank1
    shard = 3 * (64 * 256 + 64)
    assert model_state_bytes(snap)["optimizer_state"] == 2 * 4 * shard == 394_752


@pytest.fixture(scope="module")
def zero2_rank1(tmp_path_factory):
    """`memlens run --rank 1 -- accelerate launch --config_file zero2.yaml fsdp_mlp.py`: the
    YAML's DeepSpeed section (ZeRO stage 2, bf16, 4 processes) through accelerate's DeepSpeed
    plugin, traced once."""
    tmp = tmp_path_factory.mktemp("zero2")
    snap, report = tmp / "snap.json", tmp / "report.json"
    out = run_memlens("run", "--rank", "1", "--progress", "none", "--snapshot", str(snap),
                      "--", "accelerate", "launch", "--config_file", "zero2.yaml",
                      "fsdp_mlp.py", "--report", str(report), cwd=CONFIGS)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text()), json.loads(report.read_text())


@pytest.mark.slow
def test_a_zero_2_yaml_runs_deepspeed_with_zeros_model_states(zero2_rank1):
    """ZeRO stage 2 on 4 ranks, bf16 with the script's torch AdamW (ZeRO's accounting for
    mixed-precision Adam): every rank holds the 16-bit model (2Ψ); its optimizer state is the
    fp32 copy of its partition and AdamW's two moments of it (12Ψ/N); when the inner optimizer
    steps, the partition's gradient is fp32 (4Ψ/N) and the 16-bit ones reduced into it are gone.
    Ψ = 3 x 65,792 = 197,376 is a multiple of 2N = 8 (DeepSpeed's alignment): no padding."""
    from support.ranks import model_state_bytes

    snap, report = zero2_rank1
    assert (report["distributed_type"], report["num_processes"], report["mixed_precision"]) == (
        "DistributedType.DEEPSPEED", 4, "bf16")
    assert report["env"]["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "2"
    psi, world = 3 * (256 * 256 + 256), 4
    assert psi % (2 * world) == 0
    assert model_state_bytes(snap) == {"parameter": 2 * psi, "gradient": 4 * psi // world,
                                       "optimizer_state": 12 * psi // world}


def test_a_launch_json_configuration_running_accelerates_launcher(tmp_path):
    from memlens.targets.launchers import from_launch

    vscode = tmp_path / ".vscode"
    vscode.mkdir()
    (vscode / "launch.json").write_text(json.dumps({"configurations": [{
        "name": "Train", "type": "debugpy", "request": "launch",
        "module": "accelerate.commands.launch", "cwd": str(tmp_path),
        "args": ["--multi_gpu", "--num_processes", "8", "--num_machines", "2",
                 "--mixed_precision", "bf16", "train.py", "--lr", "1"]}]}))
    job = from_launch(f"{vscode / 'launch.json'}:Train")
    # 8 processes over 2 machines: 4 per machine; the script, not accelerate, is traced.
    assert (job.target.path, job.target.args, job.world_size, job.nproc_per_node) == (
        "train.py", ["--lr", "1"], 8, 4)
    assert job.target.env["ACCELERATE_MIXED_PRECISION"] == "bf16"
