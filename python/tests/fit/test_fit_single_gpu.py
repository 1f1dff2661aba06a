"""`memlens fit --gpus 1` over a job launched as one plain process (`python train.py`) stays one
process (issue 27 item 5): no RANK/WORLD_SIZE, so a script with a DDP path does not take it and
every point is what `memlens run` says for the same configuration."""

import json

import pytest

from memlens.fit.script_flags import apply_point
from memlens.fit.space import Axis, Point, Target
from memlens.targets.job import Job
from memlens.targets.script import ScriptTarget
from support.runs import run_memlens

GPUS = [Axis("gpus", ["1", "2"], Target("world"))]

RECORDS_ITS_RANK = """\
import json, os, torch
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "env.json"), "w") as f:
    json.dump({k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}, f)
model = torch.nn.Linear(64, 64).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_one_gpu_of_a_plain_process_is_no_distributed_job():
    plain = Job(ScriptTarget(path="train.py"))
    assert apply_point(plain, GPUS, Point(("1",))).world_size is None
    assert apply_point(plain, GPUS, Point(("2",))).world_size == 2


def test_one_gpu_of_a_torchrun_job_is_a_one_rank_torchrun_job():
    torchrun = Job(ScriptTarget(path="train.py"), world_size=8, nproc_per_node=8)
    assert apply_point(torchrun, GPUS, Point(("1",))).world_size == 1


@pytest.mark.slow  # a search in fresh processes
def test_fit_gpus_1_over_python_train_py_sets_no_rank_variables(tmp_path):
    (tmp_path / "train.py").write_text(RECORDS_ITS_RANK)
    out = run_memlens("fit", "--gpus", "1", "--json", "--jobs", "1", "--", "train.py",
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((tmp_path / "env.json").read_text()) == {
        "RANK": None, "WORLD_SIZE": None, "LOCAL_RANK": None}
    row = json.loads(out.stdout)["frontier"][0]
    assert (row["gpus"], row["verdict"]) == (1, "fits")
