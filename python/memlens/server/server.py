"""The memlens language server: its state (settings, targets, snapshot index, open documents,
running traces, diagnostics) and what happens when any of them changes. The LSP handlers that
call into it are in handlers/; what it sends is built in payloads.py and sent through
client.py; traces are commands.py's."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Coroutine

from lsprotocol import types as lsp
from pygls import uris
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, default_converter

from .. import __version__
from ..errors import MemlensError
from ..units import parse_bytes
from . import payloads
from . import protocol as P
from .client import LspClient
from .commands import LspTraceHooks, TraceCommands
from .diagnostics import DiagnosticStore
from ..snapshot.digest import normalize_path
from .documents import DocState
from .fitting import FitCommands
from .index import SnapshotEntry, SnapshotIndex
from .settings import Settings, parse_settings
from .targets import RecipeCache, TargetInfo, document_targets, scan_workspace
from .traced import TracedTexts
from .tracing import TraceRunner
from .worker import python_executable
from ..worker import warm
from ..worker.protocol import SNAPSHOT_DIR, worker_env

POLL_SECONDS = 2.0  # only where the editor cannot watch the snapshot folders
SCAN_MAX_AGE = 10.0


class MemlensProtocol(LanguageServerProtocol):
    """pygls' protocol, plus: `$/cancelRequest` also ends the trace (or search) the request
    started (pygls only cancels the request's future; the worker must be stopped too)."""

    def _handle_cancel_notification(self, msg_id):
        super()._handle_cancel_notification(msg_id)
        if isinstance(self._server, MemlensServer):
            self._server.commands.on_cancel_request(msg_id)
            self._server.fits.on_cancel_request(msg_id)


def _plain_converter():
    """Custom methods' params stay plain dicts (pygls would make namedtuples of them)."""
    from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage

    conv = default_converter()
    conv.register_structure_hook(JsonRPCRequestMessage, lambda obj, cls: cls(**obj))
    conv.register_structure_hook(JsonRPCNotification, lambda obj, cls: cls(**obj))
    return conv


class MemlensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("memlens", __version__, protocol_cls=MemlensProtocol,
                         converter_factory=_plain_converter,
                         text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.docs: dict[str, DocState] = {}
        self.doc_targets: dict[str, list[TargetInfo]] = {}  # by normalized path
        self.scanned: list[TargetInfo] = []
        self.scanned_at = -1e9
        self._scan: asyncio.Future | None = None
        self.recipes = RecipeCache()
        self.client = LspClient(self)
        self.index = SnapshotIndex(log=lambda m: self.log(m, lsp.MessageType.Warning))
        self.traced = TracedTexts()
        self.diagnostics = DiagnosticStore(self.client.publish_diagnostics)
        hooks = LspTraceHooks(self.client, self.traced, self)
        self.runner = TraceRunner(hooks, lambda: self.settings)
        self.commands = TraceCommands(self.runner, self.index, lambda: self.settings, self.client,
                                      self.diagnostics, self.traced, self)
        self.fits = FitCommands(self.client, lambda: self.settings, self.commands.request_from)
        self._tasks: set[asyncio.Task] = set()
        self._pending_publish: dict[str, asyncio.TimerHandle] = {}
        self._pending_targets: dict[str, asyncio.TimerHandle] = {}
        self._entry_targets: dict[str, TargetInfo | None] | None = None  # snapshot -> target
        self.chosen: str | None = None  # the snapshot folder Choose Trace chose, for the session

    # -- small helpers ---------------------------------------------------------------------
    def log(self, message: str, kind: lsp.MessageType = lsp.MessageType.Info) -> None:
        self.client.log(message, kind)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.log(f"internal error: {type(exc).__name__}: {exc}", lsp.MessageType.Error)

    @property
    def folders(self) -> list[str]:
        out = []
        for f in self.workspace.folders.values():
            p = uris.to_fs_path(f.uri)
            if p:
                out.append(normalize_path(p))
        if not out and self.workspace.root_path:
            out.append(normalize_path(self.workspace.root_path))
        return list(dict.fromkeys(out))

    # -- settings ---------------------------------------------------------------------------
    def apply_settings(self, raw: Any) -> None:
        """New settings: everything they shape is sent again, so that a client need not ask
        (the budget is in every annotation's snapshot info and hover, and in diagnostics)."""
        old = self.settings
        self.settings = parse_settings(raw, lambda m: self.log(m, lsp.MessageType.Warning))
        if self.settings == old:
            return
        for state in self.docs.values():
            if old.hotLines != self.settings.hotLines:
                self.attach(state, state.entry)
            self.publish_annotations(state)
        self.update_budget_diagnostics()
        self.client.refresh_views()
        if old.python != self.settings.python or \
                (old.device == "cpu") != (self.settings.device == "cpu"):
            self.warm_up()

    def warm_up(self) -> None:
        """Start the warm worker of the configured interpreter and device kind (worker/warm.py)
        from the event loop's thread, so that the first trace is forked, not started cold."""
        warm.prestart(python_executable(self.settings.python), worker_env(),
                      shim=self.settings.device != "cpu")

    async def pull_settings(self) -> None:
        if not self.client.can("workspace", "configuration"):
            return
        try:
            result = await asyncio.wait_for(self.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section=P.SETTINGS_SECTION)])
            ), 10)
        except Exception as e:
            self.log(f"could not read the memlens settings: {e}", lsp.MessageType.Warning)
            return
        if result and isinstance(result[0], dict):
            self.apply_settings(result[0])

    # -- targets ----------------------------------------------------------------------------
    def update_document_targets(self, state: DocState, delay: float = 0.0) -> None:
        """Re-read the targets a document defines (after `delay` seconds without a change)."""
        old = self._pending_targets.pop(state.uri, None)
        if old is not None:
            old.cancel()
        if delay > 0:
            def later() -> None:
                self._pending_targets.pop(state.uri, None)
                if self.docs.get(state.uri) is state:
                    self.update_document_targets(state)
            self._pending_targets[state.uri] = asyncio.get_running_loop().call_later(delay, later)
            return
        self._entry_targets = None
        try:
            self.doc_targets[state.path] = document_targets(state.path, state.text, self.folders,
                                                            self.recipes)
        except MemlensError as e:
            self.doc_targets[state.path] = []
            self.log(f"{state.path}: {e}", lsp.MessageType.Warning)

    async def scan(self, force: bool = False) -> None:
        """Look for targets in the workspace (in a thread); callers share a scan in flight."""
        loop = asyncio.get_running_loop()
        if self._scan is not None and not self._scan.done():
            await asyncio.shield(self._scan)
            if not force:
                return
        if not force and loop.time() - self.scanned_at < SCAN_MAX_AGE:
            return
        self.scanned_at = loop.time()
        warn = lambda m: self.log(m, lsp.MessageType.Warning)  # noqa: E731
        self._scan = asyncio.ensure_future(
            asyncio.to_thread(scan_workspace, self.folders, warn, self.recipes))
        self.scanned = await asyncio.shield(self._scan)
        self._entry_targets = None

    def all_targets(self) -> list[TargetInfo]:
        out = {t.id: t for t in self.scanned if t.path not in self.doc_targets}
        for ts in self.doc_targets.values():
            out.update((t.id, t) for t in ts)
        return sorted(out.values(), key=lambda t: (t.kind != "model", t.id))

    def find_target(self, target_id: str) -> TargetInfo | None:
        return next((t for t in self.all_targets() if t.id == target_id), None)

    def targets_in(self, path: str) -> list[TargetInfo]:
        """The targets the file `path` defines, read as the editor has it (else from disk)."""
        text = self.docs_text(path)
        if text is None:
            return []
        try:
            return document_targets(path, text, self.folders, self.recipes)
        except MemlensError:
            return []

    def entry_for(self, t: TargetInfo) -> SnapshotEntry | None:
        """The newest snapshot of a target: written for it by this server, or by the CLI run
        in the workspace folder (the same folder under .memlens/: worker/protocol.py)."""
        return self.index.by_slug(t.folder, t.slug)

    def target_of(self, e: SnapshotEntry) -> TargetInfo | None:
        """The target whose newest snapshot `e` is (cached until targets or snapshots change)."""
        if self._entry_targets is None:
            self._entry_targets = {}
            for t in self.all_targets():
                newest = self.entry_for(t)
                if newest is not None:
                    self._entry_targets.setdefault(newest.path, t)
        return self._entry_targets.get(e.path)

    def budget_for(self, t: TargetInfo | None, e: SnapshotEntry) -> int:
        if self.settings.budget is not None:
            return self.settings.budget
        if t is not None and t.budget:
            try:
                return parse_bytes(t.budget)
            except ValueError:
                self.log(f"recipe budget {t.budget!r} is not a size", lsp.MessageType.Warning)
        return e.digest["meta"]["deviceTotalBytes"]

    def snapshot_info(self, e: SnapshotEntry, t: TargetInfo | None = None) -> P.SnapshotInfo:
        """`e` (which has a digest) with its target (found when not given) and budget."""
        if t is None:
            t = self.target_of(e)
        return payloads.snapshot_info(e, t, self.budget_for(t, e))

    def target_json(self, t: TargetInfo) -> P.Target:
        e = self.entry_for(t)
        return payloads.target(t, t.id in self.runner.running,
                               self.snapshot_info(e, t) if e is not None else None)

    # -- snapshots and documents ------------------------------------------------------------
    async def refresh_index(self, changed: bool = False) -> None:
        """Pick up snapshots; `changed`: the index has changed already (a snapshot added with
        the digest its worker sent)."""
        if await self.index.refresh(self.folders) or changed:
            self.on_index_changed()

    def on_index_changed(self) -> None:
        self._entry_targets = None
        for state in self.docs.values():
            entry = self.shown_entry(state.path)
            if entry is not state.entry:  # another snapshot, or the same one read again
                self.attach(state, entry)
                self.publish_annotations(state)
        self.update_budget_diagnostics()
        self.client.refresh_views()
        self.client.notify(P.NOTIFY_SNAPSHOTS_CHANGED, self.snapshots_json())

    def shown_entry(self, path: str) -> SnapshotEntry | None:
        """The one snapshot every view of the file `path` shows (index.covering decides)."""
        return self.index.covering(path, self.chosen)

    def choose_trace(self, snapshot: str | None) -> P.ChooseTraceResult:
        """Choose Trace: the snapshot folder of `snapshot` annotates every file it covers from
        now on (its newer snapshots too); None: back to the newest covering each file."""
        e = self.index.by_path(snapshot) if snapshot else None
        if snapshot and (e is None or e.digest is None):
            raise MemlensError(f"{snapshot} is not a snapshot of this workspace")
        self.chosen = e.dir if e is not None else None
        self.on_index_changed()
        return {"chosen": self.snapshot_info(e) if e is not None else None}

    def document_traces(self, path: str | None) -> P.DocumentTracesResult:
        """The snapshots Choose Trace offers for the file `path` (None: the workspace's)."""
        entries = self.index.covering_all(path) if path else self.index.usable()
        shown = self.shown_entry(path) if path else None
        chosen = next((e for e in self.index.usable() if e.dir == self.chosen), None)
        return {"traces": [self.snapshot_info(e) for e in entries],
                "shown": shown.path if shown else None,
                "chosen": chosen.path if chosen else None}

    def attach(self, state: DocState, entry: SnapshotEntry | None) -> None:
        """Show `entry` in a document, placed by the text its lines refer to. The snapshot
        attached already (read again, or new settings) keeps the text it had: the document
        may have been edited and saved since."""
        if entry is not None and state.entry is not None and entry.path == state.entry.path:
            base = state.base
        else:
            base = self.traced.text_of(entry, state.path) if entry is not None else None
        state.attach(entry, base, self.settings.hotLines)

    def snapshots_json(self) -> P.SnapshotsResult:
        return {"snapshots": [self.snapshot_info(e) for e in self.index.usable()]}

    def update_budget_diagnostics(self) -> None:
        seen = set()
        for t in self.all_targets():
            key = f"budget:{t.id}"
            seen.add(key)
            e = self.entry_for(t)
            diag = payloads.budget_diagnostic(t, e.digest, self.budget_for(t, e)) if e else None
            self.diagnostics.set(key, uris.from_fs_path(t.path), diag)
        for key in self.diagnostics.keys():
            if key.startswith("budget:") and key not in seen:
                self.diagnostics.clear(key)

    def annotations_json(self, state: DocState) -> P.AnnotationsParams:
        e = state.entry
        if e is None or e.digest is None:
            return payloads.annotations(state, None)
        return payloads.annotations(state, self.snapshot_info(e), chosen=e.dir == self.chosen)

    def publish_annotations(self, state: DocState, delay: float = 0.0) -> None:
        """Send memlens/annotations for a document (debounced by `delay` seconds)."""
        old = self._pending_publish.pop(state.uri, None)
        if old is not None:
            old.cancel()

        def send() -> None:
            self._pending_publish.pop(state.uri, None)
            if self.docs.get(state.uri) is state:
                self.client.notify(P.NOTIFY_ANNOTATIONS, self.annotations_json(state))

        if delay <= 0:
            send()
        else:
            self._pending_publish[state.uri] = asyncio.get_running_loop().call_later(delay, send)

    def open_document(self, uri: str, text: str, version: int | None) -> DocState:
        path = normalize_path(uris.to_fs_path(uri) or uri)
        state = DocState(uri, path, text, version)
        self.docs[uri] = state
        self.attach(state, self.shown_entry(path))
        self.update_document_targets(state)
        self.publish_annotations(state)
        return state

    # -- documents' text ------------------------------------------------------------------
    def open_paths(self) -> set[str]:
        return {state.path for state in self.docs.values()}

    def docs_text(self, path: str) -> str | None:
        for state in self.docs.values():
            if state.path == path:
                return state.text
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None

    def read_lines(self, path: str) -> list[str]:
        text = self.docs_text(normalize_path(path))
        return text.split("\n") if text is not None else []

    async def watch_snapshots(self) -> None:
        """Pick up snapshots that other processes (the CLI) write: the editor watches the
        snapshot folders and says what changed (workspace/didChangeWatchedFiles, registered
        here); an editor that cannot watch files for a server has the folders polled."""
        if self.client.can("workspace", "did_change_watched_files", "dynamic_registration"):
            try:
                await self.client.watch_files(f"**/{SNAPSHOT_DIR}/**/*.json")
                return
            except Exception as e:
                self.log(f"snapshot folders polled: the editor refused to watch them ({e})",
                         lsp.MessageType.Log)
        self.spawn(self.poll())

    async def poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            await self.refresh_index_logged()

    async def refresh_index_logged(self) -> None:
        try:
            await self.refresh_index()
        except Exception as e:  # keep watching whatever a snapshot folder holds
            self.log(f"snapshot index: {type(e).__name__}: {e}", lsp.MessageType.Warning)

    def server_info(self) -> P.ServerInfo:
        return payloads.server_info(
            os.getpid(), __version__, sys.executable, "torch" in sys.modules,
            [(r.request.target.id, r.worker.pid)
             for r in [*self.runner.running.values(), *self.fits.running.values()]
             if r.worker is not None and r.worker.pid is not None])
