"""Reading launch configurations and torchrun lines (memlens.targets.launch, memlens.targets.jsonc)."""

import pytest

from memlens.targets.launch_argv import launched_script
from memlens.errors import MemlensError
from memlens.targets.launch import (find_launch_config, launch_configs, parse_jsonc, read_launch_file,
                            torchrun_commands)


def test_jsonc_takes_comments_and_trailing_commas():
    doc = parse_jsonc("""{
      // a comment with "quotes" and a , comma
      "url": "http://example.com/a//b", /* block
      comment */ "list": [1, 2.5, -3e2, true, null,],
      "esc": "tab\\t \\u00e9 \\"q\\"",
    }""")
    assert doc == {"url": "http://example.com/a//b", "list": [1, 2.5, -300.0, True, None],
                   "esc": "tab\t é \"q\""}
    assert doc.line == 1


@pytest.mark.parametrize("text,line,what", [
    ('{\n  "a": 1\n  "b": 2\n}', 3, "expected ',' or '}'"),
    ('{"a": [1, 2}', 1, "expected ',' or ']'"),
    ('{\n\n"a": "unterminated\n}', 3, "newline inside a string"),
    ("{} extra", 1, "unexpected text after the value"),
    ("/* never closed", 1, "unterminated comment"),
    ("[" * 500, 1, "nested too deeply"),
])
def test_jsonc_errors_name_the_line(text, line, what):
    with pytest.raises(MemlensError) as e:
        parse_jsonc(text, "launch.json")
    assert e.value.location.line == line
    assert what in e.value.message


LAUNCH = """{
  "version": "0.2.0",
  "configurations": [
    {"name": "Train", "type": "debugpy", "request": "launch",
     "program": "${workspaceFolder}/train.py", "args": ["--lr", "3e-4"],
     "env": {"DATA": "${workspaceFolder}/data", "HOME_IS": "${userHome}"},},
    {"name": "As a string", "type": "python", "program": "t.py", "args": "--a 1 --b 'x y'",
     "cwd": "${workspaceFolder}/sub"},
    {"name": "Module", "type": "debugpy", "request": "launch", "module": "pkg.train"},
    {"name": "Torchrun", "type": "debugpy", "request": "launch",
     "module": "torch.distributed.run",
     "args": ["--nnodes", "2", "--nproc_per_node=8", "train.py", "--steps", "5"]},
    {"name": "Attach", "type": "debugpy", "request": "attach", "connect": {"port": 5678}},
    {"name": "Node", "type": "node", "request": "launch", "program": "x.js"},
    {"name": "Unknown var", "type": "debugpy", "request": "launch", "program": "${file}"},
  ]
}"""


def test_launch_configs_resolve_variables_and_skip_what_is_not_a_python_launch(tmp_path):
    cfgs = {c.name: c for c in launch_configs(parse_jsonc(LAUNCH), "/ws")}
    assert list(cfgs) == ["Train", "As a string", "Module", "Torchrun", "Unknown var"]
    train = cfgs["Train"]
    assert (train.program, train.args, train.cwd, train.line) == (
        "/ws/train.py", ["--lr", "3e-4"], "/ws", 4)
    assert train.env["DATA"] == "/ws/data" and "${" not in train.env["HOME_IS"]
    assert cfgs["As a string"].args == ["--a", "1", "--b", "x y"]
    assert cfgs["As a string"].cwd == "/ws/sub"
    assert (cfgs["Module"].module, cfgs["Module"].program) == ("pkg.train", None)
    tr = cfgs["Torchrun"]
    assert (tr.program, tr.args, tr.nproc_per_node, tr.nnodes, tr.world_size) == (
        "train.py", ["--steps", "5"], 8, 2, 16)
    assert cfgs["Unknown var"].unresolved == ["${file}"]


def test_read_launch_file_and_find_a_configuration(tmp_path):
    vscode = tmp_path / ".vscode"
    vscode.mkdir()
    (vscode / "launch.json").write_text(LAUNCH)
    cfgs = read_launch_file(vscode / "launch.json")
    assert cfgs[0].program == str(tmp_path.resolve() / "train.py")
    assert find_launch_config(vscode / "launch.json", "Module").module == "pkg.train"
    with pytest.raises(MemlensError, match="no Python launch configuration named 'Nope'.*'Train'"):
        find_launch_config(vscode / "launch.json", "Nope")


SCRIPT = r"""#!/bin/bash
# torchrun --nproc_per_node=99 commented.py
GPUS=${GPUS:-4}
NODES=2
export OMP_NUM_THREADS=1
CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --standalone --nnodes=$NODES \
    --nproc_per_node=$GPUS train.py --batch-size 8 \
    --lr 3e-4
echo "done"
python3 -m torch.distributed.run --nproc-per-node 2 -m pkg.train --x 1
torchrun --nnodes 1:4 --nproc_per_node gpu --rdzv_endpoint host:29500 pretrain.py
python train.py --not-torchrun
"""


def test_torchrun_lines_are_found_with_variables_and_continuations():
    cmds = torchrun_commands(SCRIPT)
    assert [(c.line, c.end_line) for c in cmds] == [(6, 8), (10, 10), (11, 11)]
    a, b, c = cmds
    assert (a.script, a.args, a.nproc_per_node, a.nnodes, a.world_size) == (
        "train.py", ["--batch-size", "8", "--lr", "3e-4"], 4, 2, 8)
    assert a.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert (b.module, b.script, b.args, b.world_size) == ("pkg.train", None, ["--x", "1"], 2)
    assert (c.script, c.nnodes, c.nproc_per_node, c.world_size) == ("pretrain.py", 4, None, None)
    assert a.name == "train.py (line 6)"


@pytest.mark.parametrize("launcher,args,expected", [
    # torchrun's default is one process per node; --standalone and rendezvous options read past.
    ("torchrun", ["--standalone", "train.py", "--lr", "1"], ("train.py", None, ["--lr", "1"], 1, 1)),
    ("torch.distributed.run", ["--nnodes=2", "--nproc-per-node", "4", "--rdzv-endpoint", "h:1",
                               "-m", "pkg.train", "--x"], (None, "pkg.train", ["--x"], 4, 8)),
    # accelerate counts processes over all machines: 16 on 2 machines are 8 per node.
    ("accelerate", ["--multi-gpu", "--num_machines", "2", "--num-processes=16",
                    "--main_process_ip", "h", "train.py", "--a"],
     ("train.py", None, ["--a"], 8, 16)),
    ("accelerate", ["--num_processes", "1", "train.py"], ("train.py", None, [], None, None)),
    ("python", ["train.py", "--a"], ("train.py", None, ["--a"], None, None)),
])
def test_recorded_launch_commands_become_scripts_and_process_counts(launcher, args, expected):
    s = launched_script(launcher, args)
    assert (s.script, s.module, s.args, s.nproc_per_node, s.world_size) == expected


def test_accelerate_tells_the_script_its_mixed_precision():
    env = launched_script("accelerate", ["--num_processes", "2", "--mixed_precision", "BF16",
                                         "--use_fsdp", "t.py"]).env
    assert (env["ACCELERATE_MIXED_PRECISION"], env["ACCELERATE_USE_FSDP"]) == ("bf16", "true")
    assert launched_script("accelerate", ["--num_processes", "2", "t.py"]).env[
        "ACCELERATE_MIXED_PRECISION"] == "no"
