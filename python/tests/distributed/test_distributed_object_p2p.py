"""Objects one simulated rank sends another: a pipeline stage built without example inputs
(torchtitan's way) learns its input shapes from the previous stage at the first step, and the
rank that receives traces the sender in a helper worker, which pauses after each send and ends
with the receiver (pp_train.py --infer-shapes, object_p2p.py)."""

import json

import pytest

from memlens.distributed.object_p2p import HELPER_NOTICE
from support.ranks import CATEGORIES, DEVICE, SCRIPTS, max_alive, model_state_bytes, peak_of
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in fresh processes

F32, HIDDEN, MICRO = 4, 512, 64 // 8  # pp_train.py: batch 64 in 8 micro-batches
RELU_OUT = MICRO * HIDDEN * F32  # 16 KiB: what each ReLU saves for backward, per micro-batch
LINEAR = (HIDDEN * HIDDEN + HIDDEN) * F32


def _rank(tmp_path, world, rank, script, *args):
    snap = tmp_path / f"rank-{rank}.json"
    out = run_memlens("run", "--device", DEVICE, "--world-size", str(world), "--rank", str(rank),
                      "--json", "--progress", "none", "--snapshot", str(snap), "--",
                      str(SCRIPTS / script), *args, cwd=tmp_path)
    return out, (json.loads(snap.read_text()) if snap.exists() else None)


def _helpers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(HELPER_NOTICE)]


def _activation_peak(snap) -> int:
    return peak_of(snap, without=tuple(c for c in CATEGORIES if c != "activation"))


def test_last_stage_traces_the_stages_before_it_once_each(tmp_path):
    """Stage 3 of 4 receives its input shapes from stage 2, which receives them from 1, which
    receives them from 0: three helper traces, one per sender."""
    out, snap = _rank(tmp_path, 4, 3, "pp_train.py", "--infer-shapes", "--steps", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    helpers = _helpers(out.stderr)
    assert [h.split()[3] for h in helpers] == ["2", "1", "0"], helpers
    # 1F1B: the last stage keeps one micro-batch in flight (its two ReLU outputs); besides, it
    # holds the 8 receive buffers made from the received shapes (one per micro-batch, saved by
    # the first Linear) and the head's 8 outputs (the schedule returns every micro-batch's).
    assert max_alive(snap, "relu") == 2
    assert _activation_peak(snap) == (2 + 8 + 8) * RELU_OUT
    assert model_state_bytes(snap)["parameter"] == 3 * LINEAR  # two blocks and the head
    assert snap["meta"]["parallel"]["stages"] == [3]


def test_every_stage_of_a_gpipe_job_with_inferred_shapes(tmp_path):
    """--ranks all, one worker at a time: rank 0 goes first and records its send; it waits for
    stage 1's answer (the gradients' shapes, sent back at backward inference), so stage 1 is
    traced once by a helper; rank 1's own trace then reads rank 0's record."""
    snap = tmp_path / "job.json"
    out = run_memlens("run", "--device", DEVICE, "--world-size", "2", "--ranks", "all",
                      "--jobs", "1", "--snapshot", str(snap), "--", str(SCRIPTS / "pp_train.py"),
                      "--infer-shapes", "--schedule", "gpipe", "--steps", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = tmp_path / "job.ranks"
    index = json.loads((folder / "index.json").read_text())
    assert [(r["rank"], r["role"]) for r in index["ranks"]] == [(0, "pp 0/2"), (1, "pp 1/2")]
    logs = {r: _helpers((folder / f"rank-{r}.log").read_text()) for r in (0, 1)}
    assert [len(logs[0]), len(logs[1])] == [1, 0], logs
    assert logs[0][0].startswith(f"{HELPER_NOTICE} 1 for its sends to rank 0")
    stage0, stage1 = (json.loads((folder / f"rank-{r}.json").read_text()) for r in (0, 1))
    # GPipe: all 8 micro-batches' ReLU outputs are alive when the backward passes start.
    assert max_alive(stage0, "relu") == max_alive(stage1, "relu") == 2 * 8
    assert _activation_peak(stage0) == 8 * 2 * RELU_OUT  # its input is the script's batch
    # Stage 1 also holds the 8 receive buffers made from what stage 0 sent, and the head's 8
    # outputs (see above).
    assert _activation_peak(stage1) == 8 * (2 + 1 + 1) * RELU_OUT
    assert model_state_bytes(stage1)["parameter"] == 3 * LINEAR


def test_objects_and_tensor_metadata_arrive_as_sent(tmp_path):
    """object_p2p.py checks what rank 1 receives itself (a dict, a bf16 tensor that requires
    grad) and fails otherwise; the received tensor is a new 16 x 1024 x 2 B = 32 KiB buffer."""
    out, snap = _rank(tmp_path, 2, 1, "object_p2p.py")
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(_helpers(out.stderr)) == 1
    assert "received (16, 1024) torch.bfloat16" in out.stderr
    assert peak_of(snap) == 2 * 16 * 1024 * 2  # the received tensor and the buffer like it


def test_a_send_that_never_comes_names_both_ranks_and_the_line(tmp_path):
    out, _ = _rank(tmp_path, 2, 1, "object_p2p.py", "--never-send")
    assert out.returncode == 1
    message = json.loads(out.stdout.splitlines()[-1])["error"]["message"]
    assert message.startswith(f"rank 1 waits at {SCRIPTS / 'object_p2p.py'}:29 for objects "
                              "from rank 0 (its message 1), but rank 0's trace ended without "
                              "sending them"), message


def test_a_helper_traces_the_senders_rank_of_the_same_job():
    """The helper's command line: the same job (a shell script is run again, with its own
    arguments after `--`), the sender's rank, no snapshot of its own."""
    from memlens.cli.all_ranks import peer_argv
    from memlens.cli.parser import build_parser
    from memlens.distributed.env import RankSpec

    args = build_parser().parse_args(
        ["run", "--device", "h100-80gb", "--rank", "3", "--snapshot", "s.json",
         "--from-script", "run_train.sh", "--", "--parallelism.pipeline_parallel_degree=4"])
    argv = peer_argv(args, RankSpec(8, 3), 2)
    assert argv == ["run", "--json", "--progress", "json", "--device", "h100-80gb",
                    "--world-size", "8", "--nproc-per-node", "8", "--rank", "2", "--no-snapshot",
                    "--from-script", "run_train.sh", "--",
                    "--parallelism.pipeline_parallel_degree=4"]
