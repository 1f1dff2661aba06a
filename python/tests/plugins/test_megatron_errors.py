"""Bad Megatron input fails as Megatron says it, for the rank that failed, with a non-zero exit:
tensor parallelism of 3 does not divide the test model's 8 attention heads."""

from __future__ import annotations

import json

import pytest

from support import megatron as M

pytestmark = [pytest.mark.slow, M.NEEDS]

# megatron.core's TransformerConfig: "num_attention_heads (8) must be a multiple of
# tensor_model_parallel_size (3)."
MEGATRON_SAYS = "must be a multiple of tensor_model_parallel_size (3)"


def test_one_rank(memlens, tmp_path):
    out = memlens("run", "--world-size", "6", "--rank", "0", "--json", "--no-snapshot", "--",
                  str(M.SCRIPT), "--tp", "3", cwd=tmp_path)
    assert out.returncode != 0
    error = json.loads(out.stdout.strip().splitlines()[-1])["error"]
    assert MEGATRON_SAYS in error["message"]
    assert error["file"].endswith("gpt_core_train.py")  # the user's line that built the config
    assert MEGATRON_SAYS in out.stderr


def test_all_ranks(memlens, tmp_path):
    out = memlens("run", "--world-size", "6", "--ranks", "all", "--progress", "none",
                  "--snapshot", str(tmp_path / "s.json"), "--", str(M.SCRIPT), "--tp", "3",
                  cwd=tmp_path, env={"COLUMNS": "40"})
    assert out.returncode != 0
    text = out.stdout + out.stderr  # a narrow terminal: the error line is still whole
    assert "rank 0 failed" in text and MEGATRON_SAYS in text, text[-3000:]
    index = json.loads((tmp_path / "s.ranks" / "index.json").read_text())
    assert index["ranks"][0]["status"] == "failed"
    assert MEGATRON_SAYS in index["ranks"][0]["error"]["message"]
