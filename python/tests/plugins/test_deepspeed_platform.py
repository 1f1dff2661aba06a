"""What DeepSpeed needs of the platform rather than of torch, without tracing a step: NVTX on a
CPU build of torch, the `deepspeed` launch line, and the error where memlens cannot simulate
what DeepSpeed asks for."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import torch

from memlens.patches import cuda_nvtx
from memlens.patches.patcher import Patcher
from memlens.targets.launch_argv import launched_script
from support.paths import TESTS
from support.runs import run_memlens

SCRIPT = TESTS / "scripts" / "deepspeed" / "zero_mlp.py"


@pytest.mark.skipif(hasattr(torch._C, "_nvtx"), reason="a CUDA build has real NVTX")
def test_nvtx_ranges_are_no_ops_while_patched_and_fail_as_before_after():
    with pytest.raises(RuntimeError, match="NVTX functions not installed"):
        torch.cuda.nvtx.range_push("before")
    patcher = Patcher()
    cuda_nvtx.apply(patcher)
    try:
        # NVTX returns the zero-based depth of the range pushed or popped.
        assert torch.cuda.nvtx.range_push("step") == 0
        assert torch.cuda.nvtx.range_push("forward") == 1
        assert torch.cuda.nvtx.range_pop() == 1
        assert torch.cuda.nvtx.range_pop() == 0
        torch.cuda.nvtx.mark("here")
        with torch.cuda.nvtx.range("block"):
            pass
        from torch._C import _nvtx  # noqa: F401  (what code that binds it directly does)
    finally:
        patcher.undo()
    assert not hasattr(torch._C, "_nvtx")
    with pytest.raises(RuntimeError, match="NVTX functions not installed"):
        torch.cuda.nvtx.mark("after")


@pytest.mark.parametrize("args,expected", [
    # nproc, world size, the option the local rank is passed in, the script's own arguments
    (["--num_gpus", "4", "train.py", "--deepspeed_config", "ds.json"],
     (4, 4, "--local_rank", ["--deepspeed_config", "ds.json"])),
    (["--num_nodes=2", "--num_gpus=8", "--master_port", "29500", "--no_local_rank", "train.py"],
     (8, 16, "", [])),
    (["--num_accelerators", "2", "--force_multi", "train.py", "--a"],
     (2, 2, "--local_rank", ["--a"])),
])
def test_deepspeed_launch_lines_become_scripts_and_process_counts(args, expected):
    s = launched_script("deepspeed", args)
    assert s.script == "train.py"
    assert (s.nproc_per_node, s.world_size, s.local_rank_arg, s.args) == expected


def test_a_deepspeed_line_after_the_double_dash_is_its_job():
    """`memlens run -- deepspeed --num_gpus 8 run_clm.py ...` (as the HF examples launch),
    like `-- torchrun ...`: the script, its arguments, 8 processes and DeepSpeed's
    --local_rank."""
    from memlens.targets.launchers import from_command

    job = from_command(["deepspeed", "--num_gpus", "8", "run_clm.py", "--deepspeed",
                        "ds.json"], "/tmp")
    assert (job.target.path, job.target.args, job.world_size, job.nproc_per_node,
            job.local_rank_arg) == ("run_clm.py", ["--deepspeed", "ds.json"], 8, 8,
                                    "--local_rank")


def test_deepspeed_without_num_gpus_depends_on_the_machine():
    s = launched_script("deepspeed", ["train.py"])
    assert s.world_size is None and "--num_gpus" in s.problem


@pytest.mark.slow
def test_init_distributed_without_a_simulated_job_names_deepspeed_and_the_way_out(tmp_path):
    out = run_memlens("run", "--progress", "none", "--no-snapshot", "--", str(SCRIPT),
                      cwd=tmp_path)
    assert out.returncode != 0
    message = " ".join(out.stderr.split())
    assert f"DeepSpeed {version('deepspeed')}: deepspeed.init_distributed()" in message
    assert "--world-size" in message and "mpi4py" not in message
