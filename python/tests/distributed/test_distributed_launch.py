"""`--launch launch.json:NAME` and `--from-script train.sh`: how a job is launched becomes a
script target of the right world size; what cannot be used says which line and why (more of
--from-script in test_launch_scripts.py)."""

import json

import pytest

from support.runs import run_memlens
from support.ranks import DEVICE, SCRIPTS

pytestmark = pytest.mark.slow  # traces in fresh processes

PROBE = str(SCRIPTS / "env_probe.py")

LAUNCH = """{
  // VS Code accepts comments ...
  "version": "0.2.0",
  "configurations": [
    {
      "name": "Train 8B",
      "type": "debugpy",
      "request": "launch",
      "module": "torch.distributed.run",
      /* torchrun's own options, then the script and its arguments */
      "args": ["--nnodes", "2", "--nproc_per_node=4", "%(probe)s", "${workspaceFolder}/report.json",
               "--lr", "3e-4",],
      "env": {"PROBE_FROM_ENV": "env wins", "PROBE_BOTH": "from env"},
      "envFile": "${workspaceFolder}/.env",
      "cwd": "${workspaceFolder}/run",
    },  // ... and trailing commas
    {"name": "Editor file", "type": "debugpy", "request": "launch", "program": "${file}"},
  ],
}
"""

ENV_FILE = """# comments and blank lines

export PROBE_FROM_FILE="quoted value"
PROBE_BOTH=from file
"""

SCRIPT = r"""#!/bin/bash
set -euo pipefail
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
NODES=2
REPORT=report.json
# torchrun --nproc_per_node=99 commented.py
PROBE_PREFIX=yes python -m torch.distributed.run \
    --nnodes=$NODES \
    --nproc_per_node $GPUS_PER_NODE \
    --rdzv_backend c10d --rdzv_endpoint localhost:29400 \
    %(probe)s $REPORT \
    --steps 10
"""


def _workspace(tmp_path):
    (tmp_path / ".vscode").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / ".vscode" / "launch.json").write_text(LAUNCH % {"probe": PROBE})
    (tmp_path / ".env").write_text(ENV_FILE)
    return tmp_path


def test_launch_json_with_comments_becomes_a_job_of_its_world_size(tmp_path):
    ws = _workspace(tmp_path)
    snap = ws / "snap.json"
    out = run_memlens("run", "--device", DEVICE, "--launch", ".vscode/launch.json:Train 8B",
                      "--rank", "6", "--no-snapshot", "--json", cwd=ws)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((ws / "report.json").read_text())
    assert (report["world"], report["rank"], report["WORLD_SIZE"], report["LOCAL_RANK"]) == (
        8, 6, "8", "2")
    assert report["argv"] == ["--lr", "3e-4"] and report["cwd"] == str(ws / "run")
    assert (report["PROBE_FROM_ENV"], report["PROBE_FROM_FILE"], report["PROBE_BOTH"]) == (
        "env wins", "quoted value", "from env")  # `env` wins over `envFile`, as in VS Code
    assert json.loads(out.stdout)["world_size"] == 8 and not snap.exists()


def test_shell_script_with_variables_and_continuations(tmp_path):
    (tmp_path / "train.sh").write_text(SCRIPT % {"probe": PROBE})
    out = run_memlens("run", "--device", DEVICE, "--from-script", "train.sh", "--json",
                      "--no-snapshot", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["world"], report["rank"], report["LOCAL_WORLD_SIZE"]) == (8, 0, "4")
    assert report["argv"] == ["--steps", "10"] and report["PROBE_PREFIX"] == "yes"


@pytest.mark.parametrize("files,flags,where,message", [
    ({".vscode/launch.json": '{\n  "configurations": [\n    {"name": "A"\n     "type": "x"}\n]}'},
     ["--launch", ".vscode/launch.json:A"], ".vscode/launch.json:4", "expected ',' or '}'"),
    ({"train.sh": "NODES=2\ntorchrun --nnodes $NODES \\\n  --nproc_per_node=$GPUS t.py\n"},
     ["--from-script", "train.sh"], "train.sh:2",
     "--nproc_per_node is $GPUS, which is empty when the script runs (a variable the script "
     "does not define?): give --world-size"),
    ({"train.sh": "torchrun --nproc_per_node gpu a.py\n"}, ["--from-script", "train.sh"],
     "train.sh:1", "--nproc_per_node gpu depends on the machine it runs on: give --world-size"),
    ({"train.sh": "accelerate launch --mixed_precision bf16 a.py\n"},
     ["--from-script", "train.sh"], "train.sh:1",
     "accelerate launch has no --num_processes (the count comes from the accelerate config "
     "or the machine's GPUs): give --world-size"),
    ({".vscode/launch.json": LAUNCH % {"probe": PROBE}},
     ["--launch", ".vscode/launch.json:Editor file"], ".vscode/launch.json:17",
     "configuration 'Editor file' uses ${file}, which only VS Code can resolve"),
    ({".vscode/launch.json": LAUNCH % {"probe": PROBE}, ".env": "PROBE_OK=1\nnot a variable\n"},
     ["--launch", ".vscode/launch.json:Train 8B"], ".env:2", "expected NAME=value"),
])
def test_what_cannot_be_read_names_the_line_and_why(tmp_path, files, flags, where, message):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    out = run_memlens("run", "--device", DEVICE, *flags, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    text = " ".join(out.stderr.split())
    assert f"{where}: " in text or f"{tmp_path / where}: " in text, text
    assert message in text, text
    assert "Traceback" not in out.stderr
