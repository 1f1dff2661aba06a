"""A script that exits with a status says why on stderr, last: the trace's error repeats it
(targets/failure.py). Argument parsers built on rich (tyro, which torchtitan uses, and typer)
print their errors in a box, whose last line is only its frame."""

import io
import textwrap

import pytest
from rich.console import Console
from rich.panel import Panel

from memlens.targets.failure import last_said

MESSAGE = ("Error parsing Config: CUDA graphs do not support pipeline parallelism yet. "
           "Set --training.disable_cuda_graphs.")


def _boxed(title: str, *parts: str) -> str:
    out = io.StringIO()
    Console(file=out, width=60, force_terminal=False).print(
        Panel("\n".join(parts), title=title, title_align="left"))
    return out.getvalue()


def test_a_boxed_message_is_said_whole_and_unframed():
    said = last_said("training starts\n" + _boxed("Value error", MESSAGE, "",
                                                  "For full helptext, see train.py --help"))
    assert said == f"Value error: {MESSAGE} For full helptext, see train.py --help"


def test_a_plain_last_line_is_said_as_it_is():
    assert last_said("a\nprog: error: unrecognized arguments: --foo\n\n") == \
        "prog: error: unrecognized arguments: --foo"
    assert last_said("") == ""
    # a frame with no top: nothing to unframe
    assert last_said("╰──────╯\n") == "╰──────╯"


@pytest.mark.slow
def test_the_trace_error_repeats_a_boxed_exit_message(memlens, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        from rich.console import Console
        from rich.panel import Panel
        import torch

        Console(file=sys.stderr, width=60).print(Panel({MESSAGE!r}, title="Value error"))
        sys.exit(2)
        """))
    out = memlens("run", "--progress", "none", "--no-snapshot", str(script), cwd=tmp_path)
    assert out.returncode == 1
    assert f"train.py exited with status 2: Value error: {MESSAGE}" in out.stderr, out.stderr
