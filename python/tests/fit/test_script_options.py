"""A script's integer argparse flags, read from its syntax tree, as axes of a search."""

from __future__ import annotations

from memlens.fit.script_options import argparse_flags

SCRIPT = '''
import argparse
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=3e-4)           # not an integer: no axis
p.add_argument("--micro_batch_size", type=int, default=8, help="per GPU")
p.add_argument("-b", "--block-size", default=1024)         # an int default is enough
p.add_argument("--layers", type=int)                       # no default: 1, 2, 4
p.add_argument("--compile", action="store_true")           # a switch: not offered
p.add_argument("--debug", default=False)                   # a bool is no integer
p.add_argument("positional", type=int)                     # not a --flag
p.add_argument("--layers", type=int, default=99)           # repeated: the first stays
'''


def test_integer_flags_become_axes_built_in_where_their_name_says_so():
    flags = argparse_flags(SCRIPT)
    assert [(f.flag, f.default, f.line) for f in flags] == [
        ("--micro_batch_size", 8, 5), ("--block-size", 1024, 6), ("--layers", None, 7)]
    mbs, block, layers = flags
    assert mbs.help == "per GPU" and mbs.axis() == "micro-batch"
    # 8, 2 x 8, 4 x 8
    assert mbs.space() == ["--micro-batch", "8,16,32", "--axis", "micro-batch=--micro_batch_size"]
    assert block.space() == ["--seq", "1024,2048,4096", "--axis", "seq=--block-size"]
    assert layers.axis() is None and layers.space() == ["--arg", "--layers=1,2,4"]


def test_a_script_that_does_not_parse_offers_nothing():
    assert argparse_flags("def (:\n") == []
    assert argparse_flags("print('no argparse')\n") == []
