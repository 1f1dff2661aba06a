"""`memlens.fit` from the editor: the search runs as `memlens fit` in a worker of its own, reports
each settled point as `$/progress`, and answers with the frontier the CLI's --json gives for the
same space; the space comes from the request or from the workspace's `[fit]` table (read by the
CLI, so the same search resumes from the run folder); a cancel ends every process of the
search. A server of its own (its workspace gets a `[fit]` table)."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from lsprotocol import types as lsp

from support.lsp import MemlensClient, pid_alive, session_fixtures
from support.lsp import execute as command
from support.paths import TESTS
from support.runs import run_memlens
from test_fit import CARD, expected_verdict, formula
from memlens.units import format_bytes

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = {"device": "h100-94gb"}
TARGET = "script:fit_gpt.py"
# test_fit.py's small GPT on 2 GPUs, full recompute, micro-batch 4 and 8: on the h100-94gb the
# formulas put 4 well inside (≈ 56 GiB allocated) and 8 beyond the card (≈ 104 GiB)
SPACE = ["--gpus", "2", "--micro-batch", "4,8", "--recompute", "full",
         "--axis", "micro-batch=--batch-size", "--axis", "recompute=--recompute"]
FIT_TABLE = """
[fit]
gpus = "2"
micro-batch = "4,8"
recompute = "full"
axis = { micro-batch = "--batch-size", recompute = "--recompute" }
"""

workspace, client = session_fixtures(SETTINGS)


@pytest.fixture(scope="module")
def cli_document(workspace, tmp_path_factory):
    """The same search by the CLI (its own copy of the script and run folder)."""
    tmp = tmp_path_factory.mktemp("cli")
    shutil.copy(TESTS / "scripts" / "fit_gpt.py", tmp / "fit_gpt.py")
    out = run_memlens("fit", "--device", "h100-94gb", "--jobs", "1", "--json", *SPACE, "--",
                      str(tmp / "fit_gpt.py"), cwd=tmp, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module", autouse=True)
def fit_script(workspace):
    shutil.copy(TESTS / "scripts" / "fit_gpt.py", workspace / "fit_gpt.py")


async def test_a_workspace_without_a_fit_table_has_no_space(client: MemlensClient):
    # the example's memlens.toml has a recipe but no [fit]: the editor asks for the axes
    space = await client.protocol.send_request_async("memlens/fitSpace", {"targetId": TARGET})
    assert (space["source"], space["keys"]) == (None, [])
    # fit_gpt.py's integer argparse flags are offered as axes: --batch-size (default 1) as
    # micro-batch 1, 2, 4; --seq-len (8192) as seq; --tp as tp; the others as generic axes
    flags = {f["flag"]: f for f in space["flags"]}
    assert list(flags) == ["--batch-size", "--seq-len", "--n-layer", "--n-embd", "--n-head",
                           "--vocab-size", "--tp", "--steps"]
    assert flags["--batch-size"]["space"] == ["--micro-batch", "1,2,4",
                                              "--axis", "micro-batch=--batch-size"]
    assert flags["--seq-len"]["space"] == ["--seq", "8192,16384,32768", "--axis", "seq=--seq-len"]
    assert flags["--n-layer"]["space"] == ["--arg", "--n-layer=4,8,16"]
    assert [flags[f]["axis"] for f in ("--batch-size", "--seq-len", "--tp", "--n-layer")] == \
        ["micro-batch", "seq", "tp", None]


async def test_the_frontier_is_the_clis_with_progress_per_point(client, workspace,
                                                                 cli_document):
    before = set(client.progress_reports)
    result = await command(client, "memlens.fit", {"targetId": TARGET, "space": SPACE}, 900)
    assert result["status"] == "ok", result
    fit = result["fit"]
    assert [a["name"] for a in fit["axes"]] == ["gpus", "micro-batch", "recompute"]
    assert fit["deviceTotalBytes"] == CARD and fit["device"] == cli_document["device"]
    # micro-batch 4 fits, 8 does not (the formulas of test_fit.py decide)
    assert [r["values"] for r in fit["frontier"]] == [["2", "4", "full"]]
    assert [r["values"] for r in fit["excluded"]] == [["2", "8", "full"]]
    for row in fit["frontier"] + fit["excluded"]:
        point = {**dict(zip(["gpus", "micro-batch", "recompute"], row["values"])), "tp": "1"}
        assert row["verdict"] == expected_verdict(point)
        assert abs(row["peakBytes"] - formula(point)) <= 0.10 * formula(point), row
    fits, oom = fit["frontier"][0], fit["excluded"][0]
    # headroom: the card less reserved and outside-allocator memory (under 1 GiB)
    assert fits["reservedPeakBytes"] >= fits["peakBytes"] and fits["headroomBytes"] > 0
    assert 0 < CARD - fits["reservedPeakBytes"] - fits["headroomBytes"] < 2**30, fits
    # out of memory: the peak is what the step needs (unlimited), beyond the card
    assert oom["headroomBytes"] < 0 and oom["peakBytes"] > CARD
    assert oom["reason"].startswith(f"OOM by {format_bytes(-oom['headroomBytes'])} on rank 0")
    assert fits["reason"] == cli_document["frontier"][0]["reason"]
    # the numbers are the CLI's, row for row, bytes as integers
    cli_rows = {r["key"]: r for r in cli_document["rows"]}
    for row in fit["frontier"] + fit["excluded"]:
        cli = cli_rows[row["key"]]
        assert (row["peakBytes"], row["reservedPeakBytes"], row["headroomBytes"],
                row["worstRank"], row["reason"]) == \
            (cli["peak_bytes"], cli["reserved_peak_bytes"], cli["headroom_bytes"],
             cli["worst_rank"], cli["reason"])
    assert fit["counts"] == {"points": 2, "traced": 2, "resumed": 0, "pruned": 0, "implied": 0,
                             "notTraced": 0, "fits": 1, "oom": 1, "errors": 0}
    # the run folder holds each point's snapshot
    snapshot = json.loads(open(fits["snapshot"]).read())
    assert snapshot["summary"]["peak_bytes"] == fits["peakBytes"]
    assert fit["runDir"].startswith(str(workspace / ".memlens" / "fit"))
    # $/progress: begin, the search's start (0 of 2), a report per settled point, end
    token = next(t for t in client.progress_reports if t not in before)
    reports = client.progress_reports[token]
    assert reports[0].title == "Finding what fits: fit_gpt.py"
    messages = [r.message for r in reports[1:-1]]
    assert messages[0] == "0/2 settled"
    settled = [m for m in messages if m.startswith(("1/2", "2/2"))]
    assert len(settled) == 2 and settled[0].startswith("1/2 settled · gpus=2,micro-batch=")
    assert reports[-1].message == "done"


async def test_the_workspace_fit_table_is_the_space_and_the_search_resumes(client, workspace):
    with open(workspace / "memlens.toml", "a") as f:
        f.write(FIT_TABLE)
    space = await client.protocol.send_request_async("memlens/fitSpace", {"targetId": TARGET})
    assert (space["source"], space["keys"]) == (f"{workspace / 'memlens.toml'} [fit]",
                                                ["axis", "gpus", "micro-batch", "recompute"])
    # the same space (from the table now): the same run folder, nothing traced again
    result = await command(client, "memlens.fit", {"targetId": TARGET}, 300)
    assert result["status"] == "ok", result
    c = result["fit"]["counts"]
    assert (c["traced"], c["resumed"], c["fits"]) == (0, 2, 1)


async def test_a_bad_space_is_refused_before_anything_runs(client):
    with pytest.raises(Exception, match="--run-dir.* is not an option of the space"):
        await command(client, "memlens.fit", {"targetId": TARGET,
                                               "space": ["--run-dir", "/tmp/x"]}, 30)


async def test_cancelling_a_search_ends_every_process_it_started(client, workspace):
    pids = workspace / "slow_pids.txt"
    pids.unlink(missing_ok=True)
    before = set(client.progress_reports)
    # each point runs slow_train.py (which never ends) under `memlens run`, under the search
    future = asyncio.ensure_future(command(client, "memlens.fit", {
        "targetId": "script:slow_train.py", "space": ["--arg", "--x=1,2"]}, 120))
    await client.wait_until(lambda: pids.exists(), what="the first point's script")
    script, child = map(int, pids.read_text().split())
    info = await client.protocol.send_request_async("memlens/serverInfo", {})
    [(target, search)] = [(r["targetId"], r["pid"]) for r in info["tracing"]]
    assert target == "script:slow_train.py"
    token = next(t for t in client.progress_reports if t not in before)
    client.protocol.notify(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL,
                           lsp.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(future, 30)
    assert result["status"] == "cancelled" and "fit" not in result
    await client.wait_until(lambda: not any(pid_alive(p) for p in (search, script, child)), 10,
                            "the search, the point's script and its child to end")
    assert client.progress_reports[token][-1].message == "cancelled"
