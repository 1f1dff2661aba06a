"""The language server end to end, driven by pytest-lsp as VS Code would drive it: targets and
CodeLens, a trace with progress, inlay hints, hovers, the annotations notification, the budget
warning, a failing target, cancellation, the time limit, edits, bad input.

One server for the module (tracing the example takes seconds); the tests run in file order
and later ones build on the trace made by `test_trace_reports_progress_and_writes_a_snapshot`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from support.lsp import (MemlensClient, apply_settings, line_of, open_document, pid_alive,
                         session_fixtures, uri)
from support.lsp import execute as command
from support.lsp import inlay_hints as hints
from memlens.units import format_bytes

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = {"device": "cpu", "traceTimeout": 300}
GPT = "model:model.py:GPT"


workspace, client = session_fixtures(SETTINGS)


def snapshot_of(workspace) -> dict:
    snaps = sorted((workspace / ".memlens").glob("model-GPT-*/*.json"))
    assert snaps, "no snapshot written"
    return json.loads(snaps[-1].read_text())


async def test_the_server_never_imports_torch(client: MemlensClient):
    info = await client.protocol.send_request_async("memlens/serverInfo", {})
    assert info["torchImported"] is False
    maps = open(f"/proc/{info['pid']}/maps").read()
    assert "libtorch" not in maps


async def test_targets_are_found_in_the_workspace(client: MemlensClient, workspace):
    result = await client.protocol.send_request_async("memlens/targets", {})
    by_id = {t["id"]: t for t in result["targets"]}
    assert {GPT, "model:failing/model.py:Broken", "script:train.py", "script:slow_train.py",
            "launch:.vscode/launch.json:Train GPT (small)",
            "launch:.vscode/launch.json:Without torch",
            "torchrun:scripts/train.sh:5"} <= set(by_id)
    assert "launch:.vscode/launch.json:Attach" not in by_id  # an attach configuration
    gpt = by_id[GPT]
    line = line_of(workspace / "model.py", "class GPT(")
    assert gpt["range"]["start"] == {"line": line, "character": 6}
    assert gpt["symbol"] == "GPT" and gpt["uri"] == uri(workspace / "model.py")
    train = by_id["launch:.vscode/launch.json:Train GPT (small)"]
    assert train["program"] == str(workspace / "train.py")
    assert train["args"][:2] == ["--n-layer", "1"]
    assert by_id["torchrun:scripts/train.sh:5"]["worldSize"] == 1


async def test_codelens_offers_trace_memory(client: MemlensClient, workspace):
    open_document(client, workspace / "model.py")
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(
        lsp.TextDocumentIdentifier(uri(workspace / "model.py"))))
    assert [(lens.range.start.line, lens.command.title) for lens in lenses] == [
        (line_of(workspace / "model.py", "class GPT("), "Trace Memory")]
    assert lenses[0].command.command == "memlens.trace"
    assert list(lenses[0].command.arguments) == [{"targetId": GPT}]


async def test_trace_reports_progress_and_writes_a_snapshot(client: MemlensClient, workspace):
    before = set(client.progress_reports)
    result = await command(client, "memlens.trace", {"targetId": GPT, "device": "cpu"})
    assert result["status"] == "ok", result
    snap = snapshot_of(workspace)
    assert result["snapshot"]["peakBytes"] == snap["summary"]["peak_bytes"]
    assert result["snapshot"]["path"].startswith(str(workspace / ".memlens" / "model-GPT-"))
    assert (workspace / ".memlens" / ".gitignore").read_text().strip().endswith("*")
    # $/progress: begin, a report per phase (with the iteration), end.
    tokens = [t for t in client.progress_reports if t not in before]
    assert len(tokens) == 1
    reports = client.progress_reports[tokens[0]]
    assert isinstance(reports[0], lsp.WorkDoneProgressBegin) and reports[0].cancellable
    assert reports[0].title == "Tracing GPT"
    messages = [r.message for r in reports if isinstance(r, lsp.WorkDoneProgressReport)]
    assert "forward/backward, iteration 1" in messages
    assert "optimizer step, iteration 2" in messages
    assert isinstance(reports[-1], lsp.WorkDoneProgressEnd) and reports[-1].message == "done"
    started = client.received("memlens/traceStarted")
    assert started and started[-1]["targetId"] == GPT and started[-1]["pid"] > 0
    # The result is the command's reply, sent once: no notification repeats it.
    assert client.received("memlens/traceFinished") == []


async def test_inlay_hints_show_module_and_line_bytes(client: MemlensClient, workspace):
    path = workspace / "model.py"
    text = path.read_text().split("\n")
    snap = snapshot_of(workspace)
    got = {h.position.line: h for h in await hints(client, path)}

    # class Block: two instances (h.0, h.1), per instance. Parameters by hand: n_embd 128 ->
    # ln_1, ln_2 (2 x 256), c_attn (128*384 + 384), c_proj (128*128 + 128), c_fc (128*512 +
    # 512), mlp.c_proj (512*128 + 128) = 198,272 float32 values.
    blocks = [m for m in snap["modules"] if m["class"] == "Block"]
    assert len(blocks) == 2 and all(m["parameter_bytes"] == 198_272 * 4 for m in blocks)
    state = sum(m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"]
                for m in blocks) // 2
    assert state >= 4 * 198_272 * 4  # AdamW: params + grads + exp_avg + exp_avg_sq
    act = sum(m["activation_bytes"] for m in blocks) // 2
    line = line_of(path, "class Block(")
    # The total first (params, grads, optimizer state and activations), then the activations.
    assert got[line].label == f"≈ {format_bytes(state + act)} · {format_bytes(act)} act ×2"
    assert got[line].position.character == len(text[line])
    assert got[line].padding_left

    # The ModuleList line in GPT.__init__ constructs both blocks.
    h_line = line_of(path, "self.h = nn.ModuleList(")
    assert got[h_line].label.endswith("act ×2") and got[h_line].label == got[line].label

    # class GPT: the whole model, one instance.
    root = next(m for m in snap["modules"] if m["fqn"] == "")
    root_state = root["parameter_bytes"] + root["gradient_bytes"] + root["optimizer_state_bytes"]
    gpt_line = line_of(path, "class GPT(")
    assert got[gpt_line].label == (f"≈ {format_bytes(root_state + root['activation_bytes'])} · "
                                   f"{format_bytes(root['activation_bytes'])} act")

    # The hottest line inside a forward: MLP's one-liner, by the snapshot's own line table.
    mlp_line = line_of(path, "return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))")
    row = next(ln for ln in snap["lines"] if ln["line"] == mlp_line + 1
               and ln["file"].endswith("model.py"))
    share = 100 * row["bytes_at_peak"] / snap["summary"]["peak_bytes"]
    assert got[mlp_line].label.startswith(
        f"≈ {format_bytes(row['bytes_at_peak'])} at peak ({share:.1f}%)")
    # Nothing inside __init__ other than construction lines; no zero-byte Dropout lines.
    assert line_of(path, "self.drop = nn.Dropout(") not in got
    assert line_of(path, "self.apply(self._init_weights)") not in got


async def test_hover_has_the_table_by_category(client: MemlensClient, workspace):
    path = workspace / "model.py"
    line = line_of(path, "class Block(")
    hover = await client.text_document_hover_async(lsp.HoverParams(
        lsp.TextDocumentIdentifier(uri(path)), lsp.Position(line, 3)))
    md = hover.contents.value
    assert hover.contents.kind == lsp.MarkupKind.Markdown
    assert "**class `Block`** · 2 instances: `h.0`, `h.1`" in md
    assert "| | per instance | × 2 | at the peak | share of peak |" in md
    # 198,272 float32 parameters per block: 774.5 KiB each, 1.5 MiB for both.
    assert "| parameters | 774.5 KiB | 1.5 MiB |" in md
    for row in ("| gradients |", "| optimizer state |", "| activations |", "| temporaries |"):
        assert row in md
    snap = snapshot_of(workspace)
    assert f"Peak **{format_bytes(snap['summary']['peak_bytes'])}**" in md
    assert f"in `{snap['summary']['peak_phase']}`" in md
    assert "rank 0 of 1 · cpu (host CPU)" in md and "traced just now" in md
    # No hover where there is no annotation.
    empty = await client.text_document_hover_async(lsp.HoverParams(
        lsp.TextDocumentIdentifier(uri(path)), lsp.Position(0, 0)))
    assert empty is None


async def test_codelens_opens_the_report_once_traced(client: MemlensClient, workspace):
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(
        lsp.TextDocumentIdentifier(uri(workspace / "model.py"))))
    peak = format_bytes(snapshot_of(workspace)["summary"]["peak_bytes"])
    assert [lens.command.title for lens in lenses] == ["Trace Memory", f"Open Report (peak {peak})"]
    report = await command(client, "memlens.openReport", lenses[1].command.arguments[0], 30)
    assert report["snapshot"]["targetId"] == GPT
    assert client.shown_documents[-1].uri == report["snapshot"]["uri"]


async def test_annotations_notification_matches_the_hints(client: MemlensClient, workspace):
    u = uri(workspace / "model.py")
    sent = [p for p in client.received("memlens/annotations") if p["uri"] == u and p["snapshot"]]
    assert sent, "no memlens/annotations for model.py"
    last = sent[-1]
    got = await hints(client, workspace / "model.py")
    assert [(a["line"], a["text"]) for a in last["annotations"]] == \
        [(h.position.line, h.label) for h in got]
    block = next(a for a in last["annotations"] if a["label"] == "h.*" and a["kind"] == "class")
    assert 0 < block["share"] < 1 and block["bytes"] > 0
    assert "hover" not in block  # built on request (textDocument/hover), not for every publish
    assert last["stale"] is False and last["snapshot"]["targetId"] == GPT
    pulled = await client.protocol.send_request_async("memlens/documentAnnotations", {"uri": u})
    assert [a["text"] for a in pulled["annotations"]] == [a["text"] for a in last["annotations"]]


async def test_budget_warning_names_the_overrun(client: MemlensClient, workspace,
                                                restore_settings):
    u = uri(workspace / "model.py")
    peak = snapshot_of(workspace)["summary"]["peak_bytes"]
    await apply_settings(client, {**SETTINGS, "budget": "1MiB"})
    diags = await client.wait_until(
        lambda: [d for d in client.diagnostics.get(u, []) if d.code == "over-budget"],
        what="the budget diagnostic")
    d = diags[0]
    assert d.severity == lsp.DiagnosticSeverity.Warning and d.source == "memlens"
    assert d.range.start.line == line_of(workspace / "model.py", "class GPT(")
    assert d.message.startswith(f"Peak memory {format_bytes(peak)} exceeds the budget of "
                                f"1.0 MiB by {format_bytes(peak - 1024**2)} (cpu, rank 0 of 1")
    # Back to the default budget (the device's memory): the warning goes away.
    await apply_settings(client, SETTINGS, push=True)
    await client.wait_until(lambda: not [d for d in client.diagnostics.get(u, [])
                                         if d.code == "over-budget"], what="no budget warning")


async def test_a_failing_target_is_an_error_at_the_users_line(client: MemlensClient, workspace):
    path = workspace / "failing" / "model.py"
    result = await command(client, "memlens.trace", {"targetId": "model:failing/model.py:Broken"})
    assert result["status"] == "failed"
    assert result["error"]["message"].endswith("RuntimeError: projection is not implemented yet")
    diags = await client.wait_until(lambda: client.diagnostics.get(uri(path)),
                                    what="the error diagnostic")
    d = diags[0]
    raise_line = line_of(path, "raise RuntimeError(")
    assert d.severity == lsp.DiagnosticSeverity.Error
    assert (d.range.start.line, d.range.start.character) == (raise_line, 8)
    related = [(r.location.range.start.line, r.message) for r in d.related_information]
    assert (line_of(path, "return self.project(h)"), "forward: return self.project(h)") in related
    assert related[-1][0] == raise_line


async def _start_slow_trace(client: MemlensClient, workspace, msg_id=None):
    pids = workspace / "slow_pids.txt"
    pids.unlink(missing_ok=True)
    n_started = len(client.received("memlens/traceStarted"))
    future = client.protocol.send_request(lsp.WORKSPACE_EXECUTE_COMMAND, lsp.ExecuteCommandParams(
        command="memlens.trace", arguments=[{"targetId": "script:slow_train.py"}]),
        msg_id=msg_id)
    await client.wait_until(lambda: pids.exists(), what="the slow script to start")
    worker, child = map(int, pids.read_text().split())
    started = client.received("memlens/traceStarted")[n_started:]
    assert started and started[0]["targetId"] == "script:slow_train.py"
    assert pid_alive(started[0]["pid"]) and pid_alive(child)
    return future, started[0]["pid"], child


async def test_cancel_request_ends_the_worker_and_its_children(client: MemlensClient, workspace):
    n = len(client.received("memlens/traceFinished"))
    future, worker, child = await _start_slow_trace(client, workspace, msg_id="slow-1")
    client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id="slow-1"))
    with pytest.raises(JsonRpcException, match="cancel"):
        await asyncio.wait_for(asyncio.wrap_future(future), 30)
    await client.wait_until(lambda: not pid_alive(worker) and not pid_alive(child), 30,
                            "the worker and its child to end")
    # The request was answered "cancelled" at once; the server still says how the trace ended.
    finished = await client.wait_until(lambda: client.received("memlens/traceFinished")[n:], 30,
                                       "memlens/traceFinished")
    assert finished[0]["targetId"] == "script:slow_train.py"
    assert finished[0]["status"] == "cancelled"
    info = await client.protocol.send_request_async("memlens/serverInfo", {})
    assert info["tracing"] == []


async def test_progress_cancel_button_ends_the_worker(client: MemlensClient, workspace):
    before = set(client.progress_reports)
    future, worker, child = await _start_slow_trace(client, workspace)
    token = next(t for t in client.progress_reports if t not in before)
    client.protocol.notify(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL,
                           lsp.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(asyncio.wrap_future(future), 30)
    assert result["status"] == "cancelled"
    await client.wait_until(lambda: not pid_alive(worker) and not pid_alive(child), 10,
                            "the worker and its child to end")
    assert client.progress_reports[token][-1].message == "cancelled"


async def test_a_worker_past_its_time_limit_is_stopped(client: MemlensClient, workspace,
                                                      restore_settings):
    await apply_settings(client, {**SETTINGS, "traceTimeout": 8})
    (workspace / "slow_pids.txt").unlink(missing_ok=True)
    n = len(client.received("memlens/traceStarted"))
    result = await command(client, "memlens.trace", {"targetId": "script:slow_train.py"}, 120)
    assert result["status"] == "timeout"
    assert result["error"]["kind"] == "Timeout"
    assert "time limit of 8 s" in result["error"]["message"]
    assert 8 <= result["durationS"] < 30
    pids = [client.received("memlens/traceStarted")[n]["pid"]]
    if (workspace / "slow_pids.txt").exists():
        pids.append(int((workspace / "slow_pids.txt").read_text().split()[1]))
    await client.wait_until(lambda: not any(pid_alive(p) for p in pids), 10,
                            "the worker (and its child) to end")
    diags = client.diagnostics.get(uri(workspace / "slow_train.py"), [])
    assert any("time limit of 8 s" in d.message for d in diags)


async def test_edits_move_annotations_and_mark_them_stale(client: MemlensClient, workspace):
    path = workspace / "model.py"
    u = uri(path)
    block = line_of(path, "class Block(")
    fresh = {h.position.line: h.label for h in await hints(client, path)}
    n_sent = len(client.received("memlens/annotations"))
    insert = lsp.TextDocumentContentChangePartial(
        range=lsp.Range(lsp.Position(block - 1, 0), lsp.Position(block - 1, 0)),
        text="# two lines\n# above Block\n")
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        lsp.VersionedTextDocumentIdentifier(uri=u, version=2), [insert]))
    moved = {h.position.line: h.label for h in await hints(client, path)}
    assert moved[block + 2] == fresh[block] + " (stale)"
    first = min(fresh)  # a line above the edit keeps its place, stale too
    assert first < block - 1 and moved[first] == fresh[first] + " (stale)"
    assert len(moved) == len(fresh)
    # (The settings change of the test above may send one more for version 1 meanwhile.)
    sent = await client.wait_until(
        lambda: [p for p in client.received("memlens/annotations")[n_sent:]
                 if p["uri"] == u and p["version"] == 2], 10, "memlens/annotations after the edit")
    assert sent[-1]["stale"] is True
    hover = await client.text_document_hover_async(lsp.HoverParams(
        lsp.TextDocumentIdentifier(u), lsp.Position(block + 2, 0)))
    assert hover.contents.value.count("*Edited since trace*") == 1
    # Undo: back to the traced text, fresh again.
    undo = lsp.TextDocumentContentChangePartial(
        range=lsp.Range(lsp.Position(block - 1, 0), lsp.Position(block + 1, 0)), text="")
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        lsp.VersionedTextDocumentIdentifier(uri=u, version=3), [undo]))
    assert {h.position.line: h.label for h in await hints(client, path)} == fresh


async def test_bad_input_gets_a_clear_answer(client: MemlensClient, workspace):
    with pytest.raises(JsonRpcException, match="unknown trace target 'model:nope.py:X'"):
        await command(client, "memlens.trace", {"targetId": "model:nope.py:X"}, 30)
    with pytest.raises(JsonRpcException, match="iterations must be a non-negative integer"):
        await command(client, "memlens.trace", {"targetId": GPT, "iterations": "two"}, 30)
    with pytest.raises(JsonRpcException, match="unknown device 'h900'; valid devices: h100-80gb"):
        await command(client, "memlens.trace", {"targetId": GPT, "device": "h900"}, 30)
    bad = workspace / ".memlens" / "broken" / "20200101-000000-000000.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"format": "memlens.snapshot", "version": 1, "meta": ')
    client.files_changed(bad)  # as the editor watching the server's glob says
    message = await client.wait_until(lambda: [
        m.message for m in client.log_messages if "broken" in m.message
        and "not valid JSON" in m.message], 60, "a log message about the broken snapshot")
    assert "looks truncated" in message[0]
    future = workspace / ".memlens" / "future" / "20200101-000000-000000.json"
    future.parent.mkdir(parents=True)
    future.write_text('{"format": "memlens.snapshot", "version": 99}')
    client.files_changed(future)
    await client.wait_until(lambda: [m for m in client.log_messages
                                     if "version 99 is not supported" in m.message], 60,
                            "a log message about the unknown version")
    info = await client.protocol.send_request_async("memlens/serverInfo", {})
    assert info["torchImported"] is False  # still alive, still without torch
