"""SDPA with a bias that is trained (T5's relative position bias) runs on a kernel that has a
gradient for it: on an H100 PyTorch prefers cuDNN, whose bias is not differentiable, so the
memory-efficient kernel takes it (memlens/cuda/sdpa.py)."""

import json

import pytest

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = '''
import torch, torch.nn as nn, torch.nn.functional as F
heads, seq, dim = 4, 64, 32
bias = nn.Parameter(torch.zeros(1, heads, seq, seq, device="cuda", dtype=torch.bfloat16))
proj = nn.Linear(heads * dim, 3 * heads * dim, device="cuda", dtype=torch.bfloat16)
opt = torch.optim.SGD([bias, *proj.parameters()], lr=0.1)
for step in range(3):
    x = torch.randn(2, seq, heads * dim, device="cuda", dtype=torch.bfloat16)
    q, k, v = (t.view(2, seq, heads, dim).transpose(1, 2) for t in proj(x).chunk(3, -1))
    plain = F.scaled_dot_product_attention(q, k, v)  # no bias: cuDNN, as PyTorch prefers
    learned = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    (plain + learned).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
'''


def test_a_learned_bias_takes_the_efficient_kernel(memlens, tmp_path):
    script, snap = tmp_path / "train.py", tmp_path / "s.json"
    script.write_text(SCRIPT)
    out = memlens("run", "--device", "h100-80gb", "--snapshot", str(snap), "--", str(script))
    assert out.returncode == 0, out.stderr[-3000:]
    kernels = json.loads(snap.read_text())["meta"]["kernels"]["scaled_dot_product_attention"]
    assert kernels == {"cudnn": 2, "efficient": 2}  # one of each per iteration, two iterations
