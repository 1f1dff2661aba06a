"""The language server keeps what it shows in step with the editor, driven by pytest-lsp as VS
Code would drive it: CodeLenses while a trace runs, annotations through typing, saves and index
refreshes, and settings changes.

One server and one trace of the example GPT for the module; the tests run in file order.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from support.lsp import (MemlensClient, apply_settings, execute, inlay_hints, line_of,
                         open_document, session_fixtures, uri)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SETTINGS = {"device": "cpu", "traceTimeout": 300}
GPT = "model:model.py:GPT"
MLP_LINE = "return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))"
versions = itertools.count(2)


workspace, client = session_fixtures(SETTINGS)


def edit(client: MemlensClient, path: Path, start: tuple[int, int], end: tuple[int, int],
         text: str) -> None:
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        lsp.VersionedTextDocumentIdentifier(uri=uri(path), version=next(versions)),
        [lsp.TextDocumentContentChangePartial(
            range=lsp.Range(lsp.Position(*start), lsp.Position(*end)), text=text)]))


async def hint_labels(client: MemlensClient, path: Path) -> dict[int, str]:
    return {h.position.line: h.label for h in await inlay_hints(client, path)}


def newest_snapshot(workspace: Path) -> Path:
    return sorted((workspace / ".memlens").glob("model-GPT-*/*.json"))[-1]


async def annotations_after(client: MemlensClient, path: Path, n: int, what: str,
                            accept=lambda params: True) -> dict:
    """The first memlens/annotations for `path` among those received after the `n`th."""
    sent = await client.wait_until(
        lambda: [p for p in client.received("memlens/annotations")[n:]
                 if p["uri"] == uri(path) and accept(p)], 60, what)
    return sent[0]


async def test_codelens_is_refreshed_as_a_trace_starts_and_ends(client: MemlensClient,
                                                                workspace):
    path = workspace / "model.py"
    open_document(client, path)
    client.lens_uri = uri(path)
    n = len(client.events)
    result = await execute(client, "memlens.trace", {"targetId": GPT})
    finished = len(client.events) - n  # the reply is the trace's end
    assert result["status"] == "ok", result
    await client.wait_until(lambda: any(
        m == "lenses" and any(t.startswith("Open Report") for t in titles)
        for m, titles in client.events[n:]), 60, "the CodeLens of the finished trace")
    events = client.events[n:]
    lenses = [(i, titles) for i, (m, titles) in enumerate(events) if m == "lenses"]
    assert any(titles == ["Tracing… (cancel)"] for i, titles in lenses if i < finished)
    # Once the worker has ended no lens says "Tracing…" (the snapshot's digest comes with the
    # worker's final line: the finished trace shows at once, nothing is read meanwhile).
    assert all(titles != ["Tracing… (cancel)"] for i, titles in lenses if i > finished), events


async def test_enter_after_typing_moves_the_annotation_with_its_code(client: MemlensClient,
                                                                     workspace):
    path = workspace / "model.py"
    line = line_of(path, MLP_LINE)
    fresh = await hint_labels(client, path)
    assert line in fresh
    edit(client, path, (line, 0), (line, 0), "y")  # typed at the start of the line ...
    edit(client, path, (line, 1), (line, 1), "\n")  # ... then Enter: the code moves down
    moved = await hint_labels(client, path)
    assert line not in moved and moved[line + 1] == fresh[line] + " (stale)"
    # The same after the indentation, with VS Code's auto-indent on Enter.
    edit(client, path, (line + 1, 8), (line + 1, 8), "z = x")
    edit(client, path, (line + 1, 13), (line + 1, 13), "\n        ")
    moved = await hint_labels(client, path)
    assert moved.get(line + 2) == fresh[line] + " (stale)", moved
    edit(client, path, (line, 0), (line + 2, 8), "        ")  # undo: exact again
    assert await hint_labels(client, path) == fresh


async def test_a_refresh_after_a_save_keeps_annotations_with_their_text(client: MemlensClient,
                                                                        workspace):
    path = workspace / "model.py"
    traced = path.read_text()
    block = line_of(path, "class Block(")
    fresh = await hint_labels(client, path)
    moved = {ln + (2 if ln >= block else 0): label + " (stale)" for ln, label in fresh.items()}
    edit(client, path, (block, 0), (block, 0), "# two lines\n# above Block\n")
    lines = traced.split("\n")
    path.write_text("\n".join(lines[:block] + ["# two lines", "# above Block"] + lines[block:]))
    snapshot = newest_snapshot(workspace)
    created = dt.datetime.fromisoformat(json.loads(snapshot.read_text())["meta"]["created"])
    saved = created.timestamp() + 5  # well after the trace
    os.utime(path, (saved, saved))
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(
        lsp.TextDocumentIdentifier(uri(path))))
    assert await hint_labels(client, path) == moved

    # The index reads the snapshot again (touched, as a sync or a copy would, and the editor,
    # watching the glob the server registered, says so): same places.
    assert client.watched == ["**/.memlens/**/*.json"]
    n = len(client.events)
    os.utime(snapshot, (saved + 1, saved + 1))
    client.files_changed(snapshot)
    await client.wait_until(lambda: [m for m, _ in client.events[n:]
                                     if m == "memlens/snapshotsChanged"], 60, "the refresh")
    sent = [p for m, p in client.events[n:]
            if m == "memlens/annotations" and p["uri"] == uri(path)]
    assert sent and sent[-1]["stale"] is True
    # the decorations' text is the number alone (their colour says stale); the hint's says it
    assert {a["line"]: a["text"] + " (stale)" for a in sent[-1]["annotations"]} == moved
    assert all(a["stale"] for a in sent[-1]["annotations"])
    assert await hint_labels(client, path) == moved

    # Closed and opened again, from the saved file: the same.
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(
        lsp.TextDocumentIdentifier(uri(path))))
    n = len(client.received("memlens/annotations"))
    open_document(client, path)
    sent = await annotations_after(client, path, n, "annotations after opening again")
    assert sent["stale"] is True and await hint_labels(client, path) == moved

    # Back to the traced text: fresh, saved or not.
    edit(client, path, (block, 0), (block + 2, 0), "")
    path.write_text(traced)
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(
        lsp.TextDocumentIdentifier(uri(path))))
    assert await hint_labels(client, path) == fresh


async def test_a_budget_change_republishes_annotations_and_the_warning(client: MemlensClient,
                                                                       workspace,
                                                                       restore_settings):
    path = workspace / "model.py"
    MiB = 1024**2
    for budget, pushed in ((MiB, True), (2 * MiB, False)):
        n = len(client.received("memlens/annotations"))
        await apply_settings(client, {**SETTINGS, "budget": budget}, push=pushed)
        sent = await annotations_after(
            client, path, n, f"annotations with the budget {budget}",
            lambda p: p["snapshot"] and p["snapshot"]["budgetBytes"] == budget)
        assert sent["annotations"]
        for a in sent["annotations"]:  # each hover, asked for, names the new budget
            hover = await client.text_document_hover_async(lsp.HoverParams(
                lsp.TextDocumentIdentifier(uri(path)), lsp.Position(a["line"], 0)))
            assert f"(budget {budget // MiB}.0 MiB)" in hover.contents.value
        await client.wait_until(lambda: [
            d for d in client.diagnostics.get(uri(path), []) if d.code == "over-budget"
            and f"exceeds the budget of {budget // MiB}.0 MiB" in d.message], 30,
            f"the over-budget warning for {budget}")
    await apply_settings(client, SETTINGS, push=True)
    await client.wait_until(lambda: not [d for d in client.diagnostics.get(uri(path), [])
                                         if d.code == "over-budget"], 30, "no budget warning")
