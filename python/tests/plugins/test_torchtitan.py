"""torchtitan's expert-parallel token exchange (plugins/torchtitan), on a stand-in package with
torchtitan 0.3.0's dispatcher method names (tests/scripts/torchtitan_style: our code, not
torchtitan's): the all-to-all is sized from routing counts read back with `.tolist()`, which a
trace answers with zeros, so it is routed evenly instead, as for Megatron's dispatchers.
torchtitan 0.3.0 itself, with expert parallelism, is traced by bench/torchtitan_newest.py."""

import json

import pytest

from support.paths import TESTS

pytestmark = pytest.mark.slow  # traces in fresh processes

SCRIPT = TESTS / "scripts" / "torchtitan_style" / "train_ep.py"
TOKENS, HIDDEN, TOP_K, RANKS = 1000, 256, 2, 2


def test_expert_parallel_tokens_are_routed_evenly(memlens, tmp_path):
    snapshot = tmp_path / "s.json"
    out = memlens("run", "--world-size", str(RANKS), "--nproc-per-node", str(RANKS), "--rank",
                  "1", "--progress", "none", "--snapshot", str(snapshot), "--", str(SCRIPT),
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    share = TOKENS * TOP_K // RANKS  # each rank's routed tokens, an equal share to each rank
    assert f"splits [{share}, {share}] [{share}, {share}] received ({TOKENS * TOP_K}, " \
           f"{HIDDEN})" in out.stdout
    snap = json.loads(snapshot.read_text())
    assert any("routed evenly" in note for note in snap["meta"]["notes"])
    allocations = snap["allocations"]
    received = [nbytes for nbytes, op in zip(allocations["requested_bytes"], allocations["op"])
                if snap["ops"][op] == "new_empty"]
    assert received == [TOKENS * TOP_K * HIDDEN * 4]  # fp32 tokens from both ranks
