"""Launch configurations and torchrun lines as trace targets, a missing torch, a new trace
replacing a running one, and trace on save. A server of its own (its snapshots of train.py
would change what model.py shows in test_server_lsp)."""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types as lsp

from support.lsp import (MemlensClient, apply_settings, line_of, open_document, pid_alive,
                         session_fixtures, uri)
from support.lsp import execute as command
from memlens.units import format_bytes

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = {"device": "cpu"}
TRAIN = "launch:.vscode/launch.json:Train GPT (small)"


workspace, client = session_fixtures(SETTINGS)



async def test_missing_torch_says_so(client: MemlensClient, workspace):
    result = await command(client, "memlens.trace",
                           {"targetId": "launch:.vscode/launch.json:Without torch"})
    assert result["status"] == "failed"
    assert result["error"]["kind"] == "MissingTorch"
    assert result["error"]["message"].startswith("PyTorch is not installed for ")
    # The diagnostic sits on the launch configuration.
    launch = workspace / ".vscode" / "launch.json"
    diags = client.diagnostics[uri(launch)]
    assert diags[0].range.start.line == line_of(launch, '"name": "Without torch"')
    assert "PyTorch is not installed" in diags[0].message


async def test_a_launch_configuration_traces_its_program_with_its_args(client, workspace):
    launch = workspace / ".vscode" / "launch.json"
    open_document(client, launch, "jsonc")
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(
        lsp.TextDocumentIdentifier(uri(launch))))
    assert [(lens.range.start.line, lens.command.title) for lens in lenses] == [
        (line_of(launch, '"name": "Train GPT (small)"'), "Trace Memory"),
        (line_of(launch, '"name": "Without torch"'), "Trace Memory")]
    n = len(client.received("memlens/traceStarted"))
    result = await command(client, "memlens.trace", {"targetId": TRAIN})
    assert result["status"] == "ok", result
    started = client.received("memlens/traceStarted")[n]
    argv = started["command"]
    assert argv[argv.index("--") + 1:] == [str(workspace / "train.py"), "--n-layer", "1",
                                           "--block-size", "64", "--batch-size", "2",
                                           "--dtype", "float32"]
    assert "--world-size" not in argv  # one process: nothing the CLI does not know yet
    assert result["snapshot"]["targetId"] == TRAIN
    # The script's own lines are annotated (the trace ran train.py, which builds the model).
    train = workspace / "train.py"
    open_document(client, train)
    hints = await client.text_document_inlay_hint_async(lsp.InlayHintParams(
        text_document=lsp.TextDocumentIdentifier(uri(train)),
        range=lsp.Range(lsp.Position(0, 0), lsp.Position(100, 0))))
    by_line = {h.position.line: h.label for h in hints}
    snap = json.loads(open(result["snapshot"]["path"]).read())
    # Gradients are made by backward, optimizer state by the step: those lines of the script.
    backward = line_of(train, "loss.backward()")
    row = next(ln for ln in snap["lines"]
               if ln["file"] == str(train) and ln["line"] == backward + 1)
    assert by_line[backward].startswith(f"≈ {format_bytes(row['bytes_at_peak'])} at peak (")
    assert line_of(train, "optimizer.step()") in by_line


async def test_a_new_trace_of_the_same_target_replaces_the_running_one(client, workspace):
    pids = workspace / "slow_pids.txt"
    pids.unlink(missing_ok=True)
    target = {"targetId": "script:slow_train.py"}
    n = len(client.received("memlens/traceStarted"))
    first = asyncio.ensure_future(command(client, "memlens.trace", target))
    await client.wait_until(lambda: pids.exists(), what="the first slow trace")
    first_worker = client.received("memlens/traceStarted")[n]["pid"]
    second = asyncio.ensure_future(command(client, "memlens.trace", target))
    result = await asyncio.wait_for(first, 30)
    assert result["status"] == "replaced"
    await client.wait_until(lambda: not pid_alive(first_worker), 10, "the first worker to end")
    await client.wait_until(lambda: len(client.received("memlens/traceStarted")) > n + 1,
                            what="the second trace")
    cancelled = await command(client, "memlens.cancelTrace", target, 30)
    assert cancelled == {"cancelled": True}
    assert (await asyncio.wait_for(second, 30))["status"] == "cancelled"


async def test_trace_on_save_retraces_what_the_file_feeds(client, workspace, restore_settings):
    await apply_settings(client, {**SETTINGS, "traceOnSave": True}, push=True)
    n = len(client.received("memlens/traceStarted"))
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(
        lsp.TextDocumentIdentifier(uri(workspace / "model.py"))))
    started = await client.wait_until(lambda: client.received("memlens/traceStarted")[n:],
                                      what="a trace started by the save")
    assert [s["targetId"] for s in started] == [TRAIN]
    await command(client, "memlens.cancelTrace", {"targetId": TRAIN}, 30)
    finished = await client.wait_until(
        lambda: [f for f in client.received("memlens/traceFinished")
                 if f["targetId"] == TRAIN and f["status"] == "cancelled"],
        what="the cancelled save trace")
    assert finished


async def test_a_torchrun_line_given_as_a_full_target(client, workspace):
    script = workspace / "scripts" / "train.sh"
    target = {"kind": "torchrun", "uri": uri(script)}
    n = len(client.received("memlens/traceStarted"))
    result = await command(client, "memlens.trace", {"target": target, "iterations": 1})
    assert result["status"] == "ok", result
    assert result["targetId"] == "torchrun:scripts/train.sh:5"
    # The text found the line; the job itself comes from running the script (the CLI's
    # --from-script), so what the shell computes reaches the trace.
    argv = client.received("memlens/traceStarted")[n]["command"]
    assert argv[-2:] == ["--from-script", f"{script}:5"] and "--" not in argv
    assert result["snapshot"]["path"].startswith(str(workspace / ".memlens" / "torchrun-"))
    listed = await client.protocol.send_request_async("memlens/snapshots", {})
    assert result["snapshot"]["path"] in [s["path"] for s in listed["snapshots"]]
