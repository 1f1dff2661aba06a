"""The seam between the tracer and its accountant (engine/accountant_host.py): what the
accountant reads of the tracer is declared, and the Tracer has all of it."""

from __future__ import annotations

import ast
from pathlib import Path

from memlens.engine import accountant
from memlens.engine.accountant_host import AccountantHost


def _declared() -> set[str]:
    names = {n for klass in AccountantHost.__mro__ for n in getattr(klass, "__annotations__", {})}
    return names | {n for n, v in vars(AccountantHost).items() if callable(v)}


def test_the_accountant_reads_only_what_its_host_declares():
    read = set()
    for node in ast.walk(ast.parse(Path(accountant.__file__).read_text())):
        if isinstance(node, ast.Attribute) and (
                isinstance(node.value, ast.Name) and node.value.id == "tracer"
                or isinstance(node.value, ast.Attribute) and node.value.attr == "tracer"):
            read.add(node.attr)
    assert read and read <= _declared(), sorted(read - _declared())


def test_the_tracer_is_an_accountant_host():
    from memlens.devices import get_device
    from memlens.engine.tracer import Tracer

    tracer = Tracer(get_device("h100-80gb"), iterations=1)
    assert [n for n in _declared() if not hasattr(tracer, n)] == []
    assert tracer.accountant.tracer is tracer and tracer.collectives is None  # one process
