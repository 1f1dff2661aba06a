"""Shared pieces of the language-server tests: the workspace, the server command, a pytest-lsp
client with VS Code-like capabilities that also records memlens' own notifications."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls import uris
from pygls.protocol import (JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage,
                            default_converter)
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import register_lsp_features

from support.paths import REPO, TESTS

EXAMPLE = REPO / "examples" / "gpt"
EXTRA = TESTS / "lsp_workspace"
SERVER_COMMAND = [sys.executable, "-m", "memlens.server"]
SLOW = 180  # seconds: generous for a trace on a loaded two-core machine


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "python"), env.get("PYTHONPATH", "")) if p)
    return env


def make_workspace(dest: Path) -> Path:
    """The example GPT (model.py, train.py, memlens.toml) plus the test fixtures."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("model.py", "train.py", "memlens.toml"):
        shutil.copy(EXAMPLE / name, dest / name)
    shutil.copytree(EXTRA, dest, dirs_exist_ok=True)
    return dest.resolve()


def uri(path: Path | str) -> str:
    return uris.from_fs_path(str(path))


def _plain_converter():
    conv = default_converter()
    conv.register_structure_hook(JsonRPCRequestMessage, lambda obj, cls: cls(**obj))
    conv.register_structure_hook(JsonRPCNotification, lambda obj, cls: cls(**obj))
    conv.register_structure_hook(JsonRPCResponseMessage, lambda obj, cls: cls(**obj))
    return conv


class MemlensClient(LanguageClient):
    """Records memlens/* notifications (as plain dicts) next to pytest-lsp's records. Like VS
    Code, it asks for the CodeLenses of `lens_uri` again on each CodeLens refresh; `events`
    holds, in order, the notifications, the refreshes and those CodeLenses' titles."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.notifications: list[tuple[str, Any]] = []
        self.events: list[tuple[str, Any]] = []
        self.inlay_refreshes = 0
        self.lens_uri: str | None = None
        self.session_settings: dict[str, Any] = {}  # what start_session gave the server
        self.settings: dict[str, Any] = {}  # the server's settings since apply_settings
        self.watched: list[str] = []  # the globs the server asked to be told about

    def files_changed(self, *paths: Path) -> None:
        """What VS Code sends for a file under a watched glob that changed on disk."""
        self.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(changes=[
            lsp.FileEvent(uri=uri(p), type=lsp.FileChangeType.Changed) for p in paths]))

    def received(self, method: str) -> list[Any]:
        return [p for m, p in self.notifications if m == method]

    async def wait_until(self, predicate, timeout: float = SLOW, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def make_client() -> MemlensClient:
    client = MemlensClient(converter_factory=_plain_converter)
    register_lsp_features(client)
    for method in ("memlens/annotations", "memlens/traceStarted", "memlens/traceFinished",
                   "memlens/snapshotsChanged"):
        def record(ls, params, method=method):
            ls.notifications.append((method, params))
            ls.events.append((method, params))
        client.feature(method)(record)

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def register_capability(ls, params):
        for r in params["registrations"] if isinstance(params, dict) else params.registrations:
            r = r if isinstance(r, dict) else default_converter().unstructure(r)
            if r["method"] == lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES:
                ls.watched += [w["globPattern"] for w in r["registerOptions"]["watchers"]]
        return None

    @client.feature(lsp.WORKSPACE_INLAY_HINT_REFRESH)
    def inlay_refresh(ls, params):
        ls.inlay_refreshes += 1

    @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
    def code_lens_refresh(ls, params):
        ls.events.append((lsp.WORKSPACE_CODE_LENS_REFRESH, None))
        if ls.lens_uri is not None:
            asyncio.ensure_future(_ask_lenses(ls, ls.lens_uri))
        return None

    return client


async def _ask_lenses(client: MemlensClient, lens_uri: str) -> None:
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(
        lsp.TextDocumentIdentifier(lens_uri)))
    client.events.append(("lenses", [lens.command.title for lens in lenses or []]))


def vscode_capabilities() -> lsp.ClientCapabilities:
    """pytest-lsp's VS Code capabilities, plus what newer VS Code also announces: inlay hints
    with refresh, CodeLens refresh, progress, show document."""
    caps = client_capabilities("visual_studio_code")
    caps.text_document.inlay_hint = lsp.InlayHintClientCapabilities(dynamic_registration=True)
    caps.workspace.inlay_hint = lsp.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    caps.workspace.code_lens = lsp.CodeLensWorkspaceClientCapabilities(refresh_support=True)
    return caps


async def start_session(client: MemlensClient, workspace: Path, settings: dict[str, Any]):
    client.set_configuration(settings, section="memlens")
    client.session_settings, client.settings = dict(settings), dict(settings)
    await client.initialize_session(lsp.InitializeParams(
        capabilities=vscode_capabilities(), root_uri=uri(workspace),
        workspace_folders=[lsp.WorkspaceFolder(uri=uri(workspace), name=workspace.name)],
        initialization_options={"settings": settings}))


def session_fixtures(settings: dict[str, Any]):
    """A test module's `workspace` (a copy of lsp_workspace) and `client` (a server of its own,
    initialised with `settings`), both module-scoped: `workspace, client = session_fixtures(S)`."""
    import pytest
    import pytest_lsp
    from pytest_lsp import ClientServerConfig

    @pytest.fixture(scope="module")
    def workspace(tmp_path_factory):
        return make_workspace(tmp_path_factory.mktemp("ws"))

    @pytest_lsp.fixture(scope="module", config=ClientServerConfig(
        server_command=SERVER_COMMAND, server_env=server_env(), client_factory=make_client))
    async def client(lsp_client: MemlensClient, workspace):
        await start_session(lsp_client, workspace, settings)
        yield
        await lsp_client.shutdown_session()

    return workspace, client


async def apply_settings(client: MemlensClient, settings: dict[str, Any], push: bool = False,
                         timeout: float = 30) -> None:
    """New `memlens` settings: the client's configuration, and the server told of the change,
    either with the settings in the notification (`push`) or to pull them (VS Code does either).
    Returns once the server applied them: it then asks for an inlay-hint refresh, after it sent
    the annotations and diagnostics they change."""
    if settings == client.settings:
        return
    refreshes = client.inlay_refreshes
    client.set_configuration(settings, section="memlens")
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"memlens": settings} if push else None))
    client.settings = dict(settings)
    await client.wait_until(lambda: client.inlay_refreshes > refreshes, timeout,
                            f"the server to apply the settings {settings}")


def open_document(client: LanguageClient, path: Path, language: str = "python") -> str:
    u = uri(path)
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(
        uri=u, language_id=language, version=1, text=path.read_text())))
    return u


async def execute(client: LanguageClient, name: str, args: dict, timeout: float = SLOW):
    """workspace/executeCommand with one argument object."""
    return await asyncio.wait_for(client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command=name, arguments=[args])), timeout)


async def inlay_hints(client: LanguageClient, path: Path, lines: int = 10_000):
    return await client.text_document_inlay_hint_async(lsp.InlayHintParams(
        text_document=lsp.TextDocumentIdentifier(uri(path)),
        range=lsp.Range(lsp.Position(0, 0), lsp.Position(lines, 0))))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purpose (its parent has not reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def line_of(path: Path, text: str) -> int:
    """0-based line of the first line containing `text`."""
    for i, line in enumerate(path.read_text().split("\n")):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")
