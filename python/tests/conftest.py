"""Fixtures and hooks every test module gets; the helpers tests import are in support/.

Tests live in one folder per room of memlens (engine/, allocator/, plugins/, server/, ...), with
no __init__.py: pytest's default import mode puts each test's folder and this one on sys.path
(so `support` imports from anywhere), and a test file's name must be unique across folders."""

import os

import pytest
import pytest_asyncio

from support.runs import run_memlens
from support.slow_marks import ProcessWatch, SpawnReader, starts_processes

# pytest-xdist starts its workers with COLUMNS=80 and LINES=24, which every process a test starts
# inherits: a report then wraps at 80 columns where a user's pipe gets its full width. A size
# set where pytest was started is kept (the controller passes that on).
if "PYTEST_XDIST_WORKER" in os.environ:
    if not os.environ.get("MEMLENS_TESTS_TERMINAL_SIZE"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
else:
    os.environ["MEMLENS_TESTS_TERMINAL_SIZE"] = "1" if "COLUMNS" in os.environ else ""


@pytest.fixture
def memlens():
    return run_memlens


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    """A stand-in panel bundle for the HTML report, so tests of `--html` do not depend on the
    TypeScript build (MEMLENS_WEBVIEW_DIST points at it)."""
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "webview.js").write_text('document.body.dataset.ok="1";\n//# sourceMappingURL=webview.js.map\n')
    (d / "webview.css").write_text("body{color:red}\n/*# sourceMappingURL=webview.css.map */")
    monkeypatch.setenv("MEMLENS_WEBVIEW_DIST", str(d))
    return d


@pytest_asyncio.fixture(loop_scope="module")
async def restore_settings(client):
    """For a language-server test that changes the server's settings: the session's settings
    again afterwards, whether the test passed or not (`client` is its module's session)."""
    from support.lsp import apply_settings

    yield
    await apply_settings(client, client.session_settings, push=True)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda_build: needs a torch built with CUDA (no GPU needed); skipped otherwise")


def pytest_collection_modifyitems(config, items):
    reader = SpawnReader()
    for item in items:
        if "slow" not in item.keywords and starts_processes(item, reader):
            item.add_marker(pytest.mark.slow)
    # Read the torch install from disk: importing torch here would defeat the tests that must
    # load the fake-CUDA shim before torch (they run in subprocesses anyway).
    from memlens.cuda.build import find_torch

    if find_torch().cuda_build:
        return
    skip = pytest.mark.skip(reason="this interpreter's torch is a CPU-only build")
    for item in items:
        if "cuda_build" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _quick_tests_start_no_interpreter(request):
    """A test the slow-mark reader (support/slow_marks.py) did not find slow must not start a
    Python process: else `-m "not slow"` quietly stops being quick. Mark such a test slow."""
    if "slow" in request.node.keywords:
        yield
        return
    with ProcessWatch() as watch:
        yield
    assert not watch.started, (
        "this test starts Python processes but is not marked slow (add @pytest.mark.slow): "
        + "; ".join(watch.started))
