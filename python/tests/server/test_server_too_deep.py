"""A workspace file too deep for Python's parser is skipped with a log line; the targets of the
other files are still found (issue 15 item 7)."""

from memlens.server.targets import document_targets, scan_workspace

TRAINING = "def main():\n    loss.backward()\n    optimizer.step()\n"


def test_files_too_deep_to_parse_are_skipped_and_named(tmp_path):
    (tmp_path / "train.py").write_text(TRAINING)
    # Each would be a training script; ast.parse (the sum) or the walk of its tree (the chain,
    # a receiver of .step() 2000 attributes long) raises RecursionError.
    (tmp_path / "chain.py").write_text(TRAINING + "a" + ".b" * 2000 + ".step()\n")
    (tmp_path / "sum.py").write_text(TRAINING + "x = " + " + ".join(["1"] * 100_000) + "\n")
    warnings: list[str] = []
    root = tmp_path.resolve()
    found = scan_workspace([str(root)], warnings.append)
    assert [t.id for t in found] == ["script:train.py"]
    skipped = sorted(w for w in warnings if "nested too deeply for Python's parser" in w)
    assert [w.split(": skipped")[0] for w in skipped] == [str(root / "chain.py"),
                                                          str(root / "sum.py")]
    assert len(warnings) == 2


def test_an_open_document_too_deep_is_one_error_not_a_crash(tmp_path):
    from memlens.errors import MemlensError

    path = str(tmp_path / "chain.py")
    try:
        document_targets(path, TRAINING + "a" + ".b" * 2000 + ".step()\n", [str(tmp_path)])
    except MemlensError as e:
        assert str(e).startswith(f"{path}: skipped: nested too deeply")
    else:
        raise AssertionError("a file too deep to parse gave targets")
