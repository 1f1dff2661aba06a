"""The language server's parts meet at declared seams: a class uses only what it defines or is
given, the server supplies what traces need (commands.TraceWorkspace, tracing.TraceHooks), and
payloads.py builds protocol.py's shapes."""

from __future__ import annotations

import ast
import asyncio
import inspect
import typing
from pathlib import Path

from memlens.server import payloads
from memlens.server import protocol as P
from memlens.server.commands import LspTraceHooks, TraceCommands, TraceWorkspace
from memlens.server.documents import DocState
from memlens.server.index import SnapshotIndex
from memlens.server.server import MemlensServer
from memlens.server.settings import Settings
from memlens.server.targets import TargetInfo
from memlens.server.traced import TracedTexts
from memlens.server.tracing import RunningTrace, TraceHooks, TraceRequest, TraceRunner

from support.digests import F, MiB, entry

SERVER = Path(__file__).resolve().parents[2] / "memlens" / "server"
GPT = TargetInfo("model:/src/model.py:Net", "model", "Net", F, 9, 6, 9, "/src", symbol="Net")


def undefined_self_reads(source: str) -> dict[str, set[str]]:
    """Per class without base classes: the `self.x` it reads but neither defines nor assigns."""
    out = {}
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef) or cls.bases:
            continue
        defined = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))}
        defined |= {n.target.id for n in cls.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        reads = set()
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id == "self":
                (defined if isinstance(node.ctx, ast.Store) else reads).add(node.attr)
        out[cls.name] = reads - defined
    return out


def test_server_classes_read_only_what_they_define_or_are_given():
    # A mixin reading its host's attributes would show here (commands.TraceCommands once read
    # 25 of MemlensServer's).
    mixin = "class M:\n    def f(self):\n        return self.runner.running\n"
    assert undefined_self_reads(mixin) == {"M": {"runner"}}
    found = {f"{p.name}:{cls}": missing for p in sorted(SERVER.glob("*.py"))
             for cls, missing in undefined_self_reads(p.read_text()).items()}
    assert {"commands.py:TraceCommands", "commands.py:LspTraceHooks", "client.py:LspClient",
            "tracing.py:TraceRunner"} <= set(found)
    assert {k: v for k, v in found.items() if v} == {}


def _parameters(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_the_server_supplies_what_a_trace_needs():
    for protocol, cls in ((TraceWorkspace, MemlensServer), (TraceHooks, LspTraceHooks)):
        members = [n for n, v in vars(protocol).items()
                   if inspect.isfunction(v) and not n.startswith("_")]
        assert members, protocol
        for name in members:
            assert _parameters(getattr(cls, name)) == _parameters(getattr(protocol, name)), \
                f"{cls.__name__}.{name}"


def _keys_fit(payload: dict, typed_dict: type) -> None:
    assert typed_dict.__required_keys__ <= payload.keys() <= set(typing.get_type_hints(typed_dict))


def test_payloads_have_the_shapes_protocol_py_declares():
    e = entry()
    info = payloads.snapshot_info(e, GPT, 70 * 1024**3)
    _keys_fit(info, P.SnapshotInfo)
    assert (info["targetId"], info["peakBytes"], info["budgetBytes"], info["rank"],
            info["worldSize"]) == (GPT.id, 100 * MiB, 70 * 1024**3, 3, 8)
    target = payloads.target(GPT, True, info)
    _keys_fit(target, P.Target)
    assert target["range"] == {"start": {"line": 9, "character": 6},
                               "end": {"line": 9, "character": 9}}
    assert target["tracing"] and target["snapshot"] is info and "args" not in target  # a model
    _keys_fit(payloads.trace_started(target, 4242, ["python", "-m", "memlens"]),
              P.TraceStartedParams)

    text = "\n".join(f"line {i}" for i in range(1, 51))
    doc = DocState("file:///src/model.py", F, text)
    doc.attach(e, text, top_lines=5)
    anns = payloads.annotations(doc, info)
    _keys_fit(anns, P.AnnotationsParams)
    for a in anns["annotations"]:
        _keys_fit(a, P.Annotation)
    by_line = {a["line"] + 1: a for a in anns["annotations"]}
    # NET's lines (support/digests.py): four Blocks of 2 MiB parameters and 10 MiB activations
    # alive at the peak, 48 MiB of a 100 MiB peak; the colour's share is of the number the label
    # says: 4 x (2 + 2 + 4 MiB of model states + 10 MiB of activations) = 72 MiB of 100 MiB
    assert sorted(by_line) == [10, 12, 14, 15, 30, 40, 41, 42]
    assert (by_line[30]["bytes"], by_line[30]["share"]) == (48 * MiB, 0.72)
    assert by_line[30]["text"] == "≈ 18.0 MiB · 10.0 MiB act ×4"
    assert not anns["stale"] and anns["snapshot"] is info

    hover = payloads.hover(doc, 29, 80 * 1024**3, None, len)
    assert hover.range.end.character == len("line 30")
    assert hover.contents.value.startswith("**class `Block`** · 4 instances")
    assert payloads.hover(doc, 0, 80 * 1024**3, None, len) is None  # no annotation there
    hints = payloads.inlay_hints(doc, 29, 39, len)
    assert [(h.position.line, h.position.character) for h in hints] == [(29, 7), (39, 7)]

    lenses = payloads.code_lenses([GPT], {GPT.id}, lambda t: e, "h100-80gb", shown=e)
    assert [c.command.title for c in lenses] == ["Tracing… (cancel)",
                                                 "Open Report (peak 100.0 MiB)"]


class RecordingClient:
    """Stands in for client.LspClient: what a TraceCommands sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def log(self, message, kind=None) -> None:
        self.sent.append(("log", message))

    def notify(self, method, params) -> None:
        self.sent.append((method, params))

    def refresh_views(self) -> None:
        self.sent.append(("refresh", None))

    def refresh_code_lenses(self) -> None:
        self.sent.append(("lenses", None))

    def end_progress(self, token, message) -> None:
        self.sent.append(("end", message))


def test_trace_commands_work_with_what_they_are_given(tmp_path):
    client = RecordingClient()
    index, traced = SnapshotIndex(), TracedTexts()
    hooks = LspTraceHooks(client, traced, workspace=None)
    settings = Settings()
    runner = TraceRunner(hooks, lambda: settings)
    commands = TraceCommands(runner, index, lambda: settings, client, diagnostics=None,
                             traced=traced, workspace=None)
    run = RunningTrace(TraceRequest(GPT, "h100-80gb"), msg_id=7, token="tok",
                       stopped_before_start="replaced")
    out = asyncio.run(commands.finish_trace(run, None, str(tmp_path / "never.json")))
    assert out == {"targetId": GPT.id, "status": "replaced", "durationS": 0.0}
    # a request's trace: the reply is the result, nothing is notified
    assert client.sent == [("end", "replaced by a newer trace"), ("refresh", None)]
    client.sent.clear()
    on_save = RunningTrace(TraceRequest(GPT, "h100-80gb"), token="tok0",
                           stopped_before_start="replaced")  # no request: a trace on save
    out = asyncio.run(commands.finish_trace(on_save, None, str(tmp_path / "never.json")))
    assert client.sent == [("end", "replaced by a newer trace"), (P.NOTIFY_TRACE_FINISHED, out),
                           ("refresh", None)]
    waiting = RunningTrace(TraceRequest(GPT, "h100-80gb"), msg_id=8, token="tok2")
    runner.running[GPT.id] = waiting
    client.sent.clear()
    commands.on_progress_cancel("tok")  # another progress: nothing to stop
    assert waiting.stopped_before_start is None and client.sent == []
    commands.on_progress_cancel("tok2")  # the cancel button of its progress
    assert waiting.stopped_before_start == "cancelled"
    assert client.sent == [("log", "cancelling the trace of Net")]
