"""Values of small device tensors made from host data are known in a trace
(engine/shadow_values.py): a script that checks them itself (scripts/values/host_values.py),
and Qwen2-VL, whose vision tower and multimodal rotary positions compute shapes and loop counts
from its image grid and token ids (scripts/hf/qwen2_vl_step.py): with made-up values it
stopped on a division by zero in its grid code."""

import json
import sys

import pytest

from support.paths import TESTS
from support.ranks import model_state_bytes
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes


def test_host_made_values_are_real_and_others_made_up(tmp_path):
    out = run_memlens("run", "--json", "--no-snapshot", "--", str(TESTS / "scripts" / "values" /
                                                                "host_values.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]  # every check in the script held
    # The one read of values no host gave (a buffer written over with random ones).
    assert [(p["line"], p["op"], p["value"]) for p in json.loads(out.stdout)["placeholders"]] == [
        (30, "item", 0)]


def test_qwen2_vl_trains_on_its_grid_and_token_values(tmp_path):
    sys.path.insert(0, str(TESTS / "scripts" / "hf"))
    try:
        import torch
        from qwen2_vl_step import small_config
        from transformers import Qwen2VLForConditionalGeneration

        with torch.device("meta"):
            n = sum(p.numel() for p in Qwen2VLForConditionalGeneration(small_config()).parameters())
    finally:
        sys.path.pop(0)
    snap_path = tmp_path / "snap.json"
    out = run_memlens("run", "--progress", "none", "--snapshot", str(snap_path), "--",
                      str(TESTS / "scripts" / "hf" / "qwen2_vl_step.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    snap = json.loads(snap_path.read_text())
    assert n == 793_088
    # fp32 weights, their gradients, AdamW's two moments (its step counts stay on the host).
    assert model_state_bytes(snap) == {"parameter": 4 * n, "gradient": 4 * n,
                                       "optimizer_state": 8 * n}
    assert not snap["summary"].get("placeholders")  # every value it read was known
