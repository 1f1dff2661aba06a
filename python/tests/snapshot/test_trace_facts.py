"""The seam between the engine and the snapshot (snapshot/trace_facts.py): what the snapshot
builder reads of a trace is declared, and the engine's Tracer has all of it."""

from __future__ import annotations

import ast
from pathlib import Path

from memlens.snapshot import trace_facts
from memlens.snapshot.ledger_facts import LedgerFacts

SNAPSHOT = Path(trace_facts.__file__).parent


def _declared(protocol) -> set[str]:
    names = {n for klass in protocol.__mro__ for n in getattr(klass, "__annotations__", {})}
    return names | {n for n, v in vars(protocol).items() if callable(v) or isinstance(v, property)}


def _read_of(name: str) -> set[str]:
    """Every `name.attribute` the snapshot room's modules read."""
    out = set()
    for path in SNAPSHOT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == name:
                out.add(node.attr)
    return out


def test_what_the_snapshot_reads_of_a_trace_is_declared():
    assert _read_of("tracer") <= _declared(trace_facts.TraceFacts)
    # no duck typing left: what is declared is read as it is
    for path in SNAPSHOT.glob("*.py"):
        assert "getattr(tracer" not in path.read_text(), path.name


def test_the_tracer_has_every_fact_the_snapshot_reads():
    from memlens.devices import get_device
    from memlens.engine.tracer import Tracer

    tracer = Tracer(get_device("h100-80gb"), iterations=1)
    for name in _declared(trace_facts.TraceFacts):
        assert hasattr(tracer, name), name
    nested = {"phases": trace_facts.PhasesFacts, "modules": trace_facts.ModulesFacts,
              "stacks": trace_facts.StacksFacts, "accountant": trace_facts.PlaceholderFacts,
              "workspaces": trace_facts.WorkspaceFacts, "compiled": trace_facts.CompiledFacts,
              "ledger": LedgerFacts}
    for attribute, protocol in nested.items():
        part = getattr(tracer, attribute)
        missing = [n for n in _declared(protocol) if not hasattr(part, n)]
        assert missing == [], (attribute, missing)
    assert tracer.interrupted is False and tracer.notes == [] and tracer.end_seq == -1
