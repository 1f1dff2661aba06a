"""Interned call stacks (engine/stacks.py): frames by the code that runs and its line."""

from __future__ import annotations

import types

from memlens.engine.stacks import StackTable

SOURCE = "def forward(capture):\n    return capture()\n"


def _function(path: str, extra_constant=None):
    module = compile(SOURCE, path, "exec")
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    if extra_constant is not None:
        code = code.replace(co_consts=code.co_consts + (extra_constant,))
    return types.FunctionType(code, {})


def _innermost(table: StackTable, sid: int):
    return table.frames[table.stacks[sid][0]]


def test_equal_code_in_two_files_is_two_frames():
    """Code objects compare equal whatever their file (CPython leaves co_filename out of code
    equality): a stack keyed by the code would put the second model's line in the first's."""
    table = StackTable()
    a, b = _function("/srv/a/model.py"), _function("/srv/b/model.py")
    assert a.__code__ == b.__code__
    first, second = a(table.capture), b(table.capture)
    assert _innermost(table, first)[:2] == ("/srv/a/model.py", 2)
    assert _innermost(table, second)[:2] == ("/srv/b/model.py", 2)


def test_one_line_of_one_function_is_one_frame():
    table = StackTable()
    f, again = _function("/srv/a/model.py"), _function("/srv/a/model.py")  # compiled twice
    sids = [f(table.capture), f(table.capture), again(table.capture)]
    assert len({table.stacks[s][0] for s in sids}) == 1
    assert table.frames.count(("/srv/a/model.py", 2, "forward")) == 1


def test_code_that_cannot_be_hashed_is_not_a_users():
    """Dynamo's generated code can hold a dict among its constants: never a user frame."""
    table = StackTable()
    generated = _function("/srv/a/model.py", extra_constant={"guard": 1})
    sid = generated(table.capture)
    assert all(table.frames[i][0] != "/srv/a/model.py" for i in table.stacks[sid])
