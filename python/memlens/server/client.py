"""What the server tells the editor: log messages, notifications, `$/progress`, and requests to
refresh its inlay hints and CodeLens; each only as far as the client said it supports it."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any, Mapping

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer


class LspClient:
    """The editor at the other end of `server`'s connection."""

    def __init__(self, server: LanguageServer):
        self._server = server

    def can(self, *path: str) -> bool:
        """The client announced the capability at `path` (e.g. "window", "work_done_progress")."""
        node: Any = self._server.client_capabilities
        for name in path:
            node = getattr(node, name, None)
            if node is None:
                return False
        return bool(node)

    def log(self, message: str, kind: lsp.MessageType = lsp.MessageType.Info) -> None:
        try:
            self._server.window_log_message(lsp.LogMessageParams(type=kind, message=message))
        except Exception:  # no client yet: stderr is all there is
            print(message, file=sys.stderr)

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        self._server.protocol.notify(method, params)

    def publish_diagnostics(self, uri: str, diags: list[lsp.Diagnostic]) -> None:
        self._server.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags))

    async def watch_files(self, glob: str) -> None:
        """Ask the editor to send workspace/didChangeWatchedFiles for files matching `glob`
        (every workspace folder); raises where it refuses."""
        await asyncio.wait_for(self._server.client_register_capability_async(
            lsp.RegistrationParams(registrations=[lsp.Registration(
                id=f"memlens-watch-{uuid.uuid4().hex[:12]}",
                method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                    watchers=[lsp.FileSystemWatcher(glob_pattern=glob)]))])), 10)

    def refresh_views(self) -> None:
        if self.can("workspace", "inlay_hint", "refresh_support"):
            self._server.protocol.send_request(lsp.WORKSPACE_INLAY_HINT_REFRESH, None)
        self.refresh_code_lenses()

    def refresh_code_lenses(self) -> None:
        if self.can("workspace", "code_lens", "refresh_support"):
            self._server.protocol.send_request(lsp.WORKSPACE_CODE_LENS_REFRESH, None)

    async def begin_progress(self, title: str) -> str | None:
        """A cancellable `$/progress` at 0%; its token, or None where the client has none."""
        if not self.can("window", "work_done_progress"):
            return None
        progress = self._server.work_done_progress
        token = f"memlens-trace-{uuid.uuid4().hex[:12]}"
        try:
            await asyncio.wait_for(progress.create_async(token), 10)
        except Exception as e:
            self.log(f"no progress reporting: {e}", lsp.MessageType.Log)
            return None
        progress.begin(token, lsp.WorkDoneProgressBegin(
            title=title, cancellable=True, message="starting", percentage=0))
        return token

    def report_progress(self, token: str, message: str, percentage: int | None) -> None:
        self._server.work_done_progress.report(token, lsp.WorkDoneProgressReport(
            message=message, percentage=percentage, cancellable=True))

    def end_progress(self, token: str, message: str) -> None:
        progress = self._server.work_done_progress
        progress.end(token, lsp.WorkDoneProgressEnd(message=message))
        progress.tokens.pop(token, None)
