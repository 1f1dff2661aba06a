"""Saving fake tensors as training scripts do: `torch.save` of a checkpoint, next to
`f"{loss:.4f}"` prints (patches/torch_values.py, torch_core.py)."""

import json

import pytest

from support.runs import run_python

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = '''
import os, sys
import torch, torch.nn as nn
model = nn.Linear(32, 16).cuda()
opt = torch.optim.AdamW(model.parameters())
path = os.path.join(sys.argv[1], "ckpt.pt")
for step in range(3):
    loss = model(torch.randn(8, 32, device="cuda")).pow(2).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss:.4f} norm {norm:.3f} " + "{:.2f}".format(loss))
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    back = torch.load(path)
    print("loaded", tuple(back["model"]["weight"].shape), back["model"]["weight"].dtype,
          tuple(back["optimizer"]["state"][0]["exp_avg"].shape))
'''


def test_format_and_save_of_fake_tensors(memlens, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = memlens("run", "--json", "--no-snapshot", "--", str(script), str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    # the placeholder of a float read is 0.0, formatted as the script asked
    assert "step 0 loss 0.0000 norm 0.000 0.00" in out.stderr
    # the checkpoint keeps shapes and dtypes (no data): weight [16, 32], AdamW's exp_avg alike
    assert "loaded (16, 32) torch.float32 (16, 32)" in out.stderr
    lines = {p["line"] for p in json.loads(out.stdout)["placeholders"]}
    assert 13 in lines  # the f-string line of SCRIPT (line 1 is the empty first line)


def test_the_patch_is_undone():
    result = run_python("""
        from torch._subclasses.fake_tensor import FakeTensor
        from memlens import Tracer
        original = FakeTensor.__reduce_ex__
        with Tracer("cpu", iterations=1):
            inside = FakeTensor.__reduce_ex__ is not original
        result = [inside, FakeTensor.__reduce_ex__ is original]
    """)
    assert result == [True, True]
