"""One trace per editor: the server decides which snapshot a file shows (the newest covering
it, or the one Choose Trace chose), and its CodeLens, hints, hovers and snapshot info all come
from that one."""

from __future__ import annotations

import asyncio

from memlens.server import payloads
from memlens.server.index import SnapshotEntry, SnapshotIndex
from memlens.server.server import MemlensServer
from memlens.server.targets import TargetInfo

from support.digests import F, MiB, NET

MODEL = TargetInfo("model:/src/model.py:Net", "model", "Net", F, 9, 6, 9, "/src", symbol="Net")
SCRIPT = TargetInfo("script:/src/model.py", "script", "model.py", F, 0, 0, 0, "/src")


def snap(slug: str, created: str, peak: int, name: str) -> SnapshotEntry:
    d = {**NET, "meta": {**NET["meta"], "created": created, "targetName": name},
         "summary": {**NET["summary"], "peakBytes": peak}}
    return SnapshotEntry("/ws", f"/ws/.memlens/{slug}", f"/ws/.memlens/{slug}/1.json", 0.0,
                         digest=d, files=frozenset([F]))


# A recipe trace of Net (2 GiB peak) and, later, a script trace of the same file (15 GiB peak).
RECIPE = snap("model-net", "2026-01-01T00:00:00+00:00", 2048 * MiB, "Net")
SCRIPT_RUN = snap("script-model", "2026-01-01T01:00:00+00:00", 15360 * MiB, "model.py")
OTHER = SnapshotEntry("/ws", "/ws/.memlens/other", "/ws/.memlens/other/1.json", 0.0,
                      digest={**NET, "files": ["/other.py"]}, files=frozenset(["/other.py"]))


def index() -> SnapshotIndex:
    ix = SnapshotIndex()
    ix.entries = {e.dir: e for e in (RECIPE, SCRIPT_RUN, OTHER)}
    return ix


def test_the_newest_covering_snapshot_unless_one_was_chosen():
    ix = index()
    assert [e.dir for e in ix.covering_all(F)] == [SCRIPT_RUN.dir, RECIPE.dir]
    assert ix.covering(F) is SCRIPT_RUN
    assert ix.covering(F, RECIPE.dir) is RECIPE
    # a choice that does not cover the file leaves it the newest that does
    assert ix.covering(F, OTHER.dir) is SCRIPT_RUN
    assert ix.covering("/nothing.py", RECIPE.dir) is None


def test_codelens_names_only_the_shown_snapshot():
    newest = {MODEL.id: RECIPE, SCRIPT.id: SCRIPT_RUN}.get
    titles = lambda shown: [(c.range.start.line, c.command.title) for c in payloads.code_lenses(
        [MODEL, SCRIPT], set(), lambda t: newest(t.id), None, shown=shown)]
    # the script trace is shown: its peak (15360 MiB = 15.0 GiB) on the script's lens; the
    # model's own trace is offered without a number
    assert titles(SCRIPT_RUN) == [(9, "Trace Memory"), (9, "Show Its Trace"),
                                  (0, "Trace Memory"), (0, "Open Report (peak 15.0 GiB)")]
    assert titles(RECIPE) == [(9, "Trace Memory"), (9, "Open Report (peak 2.0 GiB)"),
                              (0, "Trace Memory"), (0, "Show Its Trace")]
    # a snapshot of a target not in the file (a launch configuration): named on the first
    lens = payloads.code_lenses([MODEL], set(), lambda t: None, None, shown=SCRIPT_RUN)
    assert [c.command.title for c in lens] == ["Trace Memory", "Showing model.py (peak 15.0 GiB)"]
    # ... and that target's own trace is offered beside it
    lens = payloads.code_lenses([MODEL], set(), lambda t: RECIPE, None, shown=SCRIPT_RUN)
    assert [c.command.title for c in lens] == ["Trace Memory", "Showing model.py (peak 15.0 GiB)",
                                               "Show Its Trace"]
    # a document no trace covers (launch.json): each target opens its own newest
    lens = payloads.code_lenses([MODEL, SCRIPT], set(), lambda t: newest(t.id), None, shown=None)
    assert [c.command.title for c in lens] == ["Trace Memory", "Open Report (peak 2.0 GiB)",
                                               "Trace Memory", "Open Report (peak 15.0 GiB)"]


def test_choose_trace_re_annotates_open_documents_and_persists():
    ls = MemlensServer()
    ls.index = index()
    sent = []
    ls.client.notify = lambda method, params: sent.append((method, params))
    ls.client.refresh_views = lambda: None
    ls.update_document_targets = lambda state, delay=0.0: None

    async def go():
        state = ls.open_document("file:///src/model.py", "\n".join(["x"] * 50), 1)
        assert state.entry is SCRIPT_RUN
        assert sent[-1][1]["snapshot"]["peakBytes"] == 15360 * MiB
        assert sent[-1][1]["chosen"] is False
        out = ls.choose_trace(RECIPE.path)
        assert out["chosen"]["path"] == RECIPE.path and state.entry is RECIPE
        anns = [p for m, p in sent if m == "memlens/annotations"][-1]
        assert (anns["snapshot"]["peakBytes"], anns["chosen"]) == (2048 * MiB, True)
        traces = ls.document_traces(F)
        assert [t["path"] for t in traces["traces"]] == [SCRIPT_RUN.path, RECIPE.path]
        assert (traces["shown"], traces["chosen"]) == (RECIPE.path, RECIPE.path)
        # a newer snapshot of the script does not take the editor back: the choice holds
        ls.on_index_changed()
        assert state.entry is RECIPE
        ls.choose_trace(None)
        assert state.entry is SCRIPT_RUN and ls.document_traces(F)["chosen"] is None

    asyncio.run(go())
